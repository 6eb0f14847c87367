"""A claimed batch's push order: the targets of urgent kinds first, then the others in turn,
each target (a stream) always in id order."""

from datetime import UTC, datetime
from uuid import UUID

from messenger_realtime.dispatch.rows import ClaimedRow
from messenger_realtime.dispatch.store import push_order

BURST, QUIET, CALLEE = UUID(int=1), UUID(int=2), UUID(int=3)


def row(
    n: int,
    kind: str = "MessageReceived",
    chat: UUID | None = BURST,
    user: UUID | None = None,
    offset: int | None = None,
) -> ClaimedRow:
    user = CALLEE if kind == "CallInvited" else user
    target = "User" if user else "ChatGroup"
    when = datetime(2026, 12, 1, tzinfo=UTC)
    return ClaimedRow(
        UUID(int=100 + n), kind, target, chat, user, None, None, None, n, "Pending", 1, 1, when,
        0.1, offset,
    )  # fmt: skip


def test_urgent_first_then_targets_take_turns_each_in_id_order() -> None:
    burst = [row(n) for n in (1, 2, 3, 4)]
    quiet = row(5, chat=QUIET)
    invite = row(6, kind="CallInvited", chat=None)
    ordered = push_order([burst[3], quiet, burst[0], invite, burst[2], burst[1]])
    assert [r.seq for r in ordered] == [6, 1, 5, 2, 3, 4]


def test_an_urgent_row_never_goes_before_an_older_row_of_its_own_stream() -> None:
    # The callee's stream: a ChatUpdated committed before the invitation (offset 4, then
    # 5). Urgent rows used to go first whatever their stream held before them: a client
    # saw 5 then 4 after a failover's backlog (issue 60's soak).
    updated = row(0, kind="ChatUpdated", chat=QUIET, user=CALLEE)
    invite = row(6, kind="CallInvited", chat=None)
    burst = [row(n) for n in (1, 2)]
    ordered = push_order([invite, burst[1], updated, burst[0]])
    assert [r.seq for r in ordered] == [0, 6, 1, 2]


def test_an_urgent_targets_rows_after_its_urgent_one_take_their_turn_with_the_others() -> None:
    # A burst chat whose second row starts a conference: its first two rows go first,
    # the rest of its burst takes turns with the quiet chat's row.
    burst = [row(1), row(2, kind="ConferenceStarted"), row(3), row(4)]
    quiet = row(5, chat=QUIET)
    ordered = push_order([quiet, *reversed(burst)])
    assert [r.seq for r in ordered] == [1, 2, 3, 5, 4]


def test_a_stream_goes_out_in_offset_order_when_its_ids_do_not_follow_it() -> None:
    # Two owners' processes made these ids in the same millisecond, in the other order
    # than their commits took the stream's offsets.
    later_id_first_offset = row(2, offset=7)
    earlier_id_later_offset = row(1, offset=8)
    ordered = push_order([earlier_id_later_offset, later_id_first_offset])
    assert [r.stream_offset for r in ordered] == [7, 8]
