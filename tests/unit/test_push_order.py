"""A claimed batch's push order: urgent kinds first, then targets in turn, each in id order."""

from datetime import UTC, datetime
from uuid import UUID

from messenger_realtime.dispatch.rows import ClaimedRow
from messenger_realtime.dispatch.store import push_order

BURST, QUIET, CALLEE = UUID(int=1), UUID(int=2), UUID(int=3)


def row(n: int, kind: str = "MessageReceived", chat: UUID | None = BURST) -> ClaimedRow:
    user = CALLEE if kind == "CallInvited" else None
    target = "User" if user else "ChatGroup"
    when = datetime(2026, 12, 1, tzinfo=UTC)
    return ClaimedRow(
        UUID(int=100 + n), kind, target, chat, user, None, None, None, n, "Pending", 1, 1, when, 0.1
    )


def test_urgent_first_then_targets_take_turns_each_in_id_order() -> None:
    burst = [row(n) for n in (1, 2, 3, 4)]
    quiet = row(5, chat=QUIET)
    invite = row(6, kind="CallInvited", chat=None)
    ordered = push_order([burst[3], quiet, burst[0], invite, burst[2], burst[1]])
    assert [r.seq for r in ordered] == [6, 1, 5, 2, 3, 4]
