"""The chaos soak's checker (bench/chaos_checker.py) finds each kind of violation it
names, names the client, stream and offset, and passes a clean run: a checker that
passes everything would make the soak prove nothing."""

import sys

from tests.support.runtime import ROOT

sys.path.insert(0, str(ROOT))
from bench.chaos_checker import Closed, Connected, Got, Membership, Recovered, Told, check

CHAT = "chat:c1"
COMMITTED = [(CHAT, offset) for offset in range(1, 11)]
MEMBERS = [Membership("alice", CHAT), Membership("bob", CHAT)]


def run(**logs: list) -> dict:  # type: ignore[type-arg]
    clients = {name: (name, log) for name, log in logs.items()}
    return check(COMMITTED, MEMBERS, clients).summary()


def every(*offsets: int) -> list[Got]:
    return [Got(CHAT, offset) for offset in offsets]


def test_a_clean_run_with_a_reconnect_and_a_recovery_passes() -> None:
    live, recovered = every(1, 2, 3), every(4, 5, 6, 7)
    alice = [*live, Closed(allow_reconnect=True), Connected(), *recovered, *every(8, 9, 10)]
    assert run(alice=alice, bob=every(*range(1, 11))) == {
        "lost": 0, "foreign": 0, "silent": 0, "disorder": 0, "duplicates": 0, "withheld": 0,
        "late": 0,
    }  # fmt: skip


def test_an_event_never_received_is_lost_and_named() -> None:
    dropped = every(*[o for o in range(1, 11) if o != 7])  # the self-test's injected loss
    found = check(
        COMMITTED, MEMBERS, {"a-1": ("alice", dropped), "b-1": ("bob", every(*range(1, 11)))}
    )
    assert found.lost == [("a-1", CHAT, 7)]
    assert found.silent == [("a-1", CHAT, 7)]  # and nobody told the client
    assert not found.clean


def test_a_resync_the_client_was_told_to_do_covers_what_it_missed() -> None:
    alice = [*every(1, 2), Closed(allow_reconnect=True), Connected(), Told(CHAT, 8), *every(9, 10)]
    assert run(alice=alice, bob=every(*range(1, 11)))["lost"] == 0


def test_an_event_of_a_stream_the_user_was_not_in_at_that_offset_is_foreign() -> None:
    members = [Membership("alice", CHAT, left=4), Membership("bob", CHAT)]
    found = check(COMMITTED, members, {"a": ("alice", every(1, 2, 3, 4, 5))})
    assert found.foreign == [("a", CHAT, 5)]  # she left with offset 4
    assert found.lost == []  # and nothing after she left is owed to her


def test_a_gap_is_silent_unless_the_hub_closed_with_allow_reconnect_or_said_resync() -> None:
    later = [Connected(), *every(3, *range(5, 11))]  # recovery fills the gap: nothing lost
    dropped = [*every(1, 2, 4), Connected(), *later[1:]]  # the socket just dropped
    summary = run(alice=dropped, bob=every(*range(1, 11)))
    assert (summary["lost"], summary["silent"]) == (0, 1)  # 3 skipped, nobody said so
    closed = [*every(1, 2, 4), Closed(allow_reconnect=True), *later]
    assert run(alice=closed, bob=every(*range(1, 11)))["silent"] == 0  # the hub said so


def test_out_of_order_within_a_connection_and_duplicates_are_counted() -> None:
    alice = [Recovered(), *every(1, 2, 4, 3, *range(5, 11), 10)]
    found = check(COMMITTED, MEMBERS, {"a": ("alice", alice)})
    assert found.disorder == [("a", CHAT, 3)]
    assert found.duplicates == {"a": 1}


def test_a_retried_row_after_later_ones_is_late_as_the_spec_allows_not_disorder() -> None:
    """The spec: a row on backoff may go out after one inserted after it. Only a row that
    took more than one push is excused; one pushed once and out of order is disorder."""
    alice = [Recovered(), *every(1, 2, 4, 3, *range(5, 11))]
    retried = check(COMMITTED, MEMBERS, {"a": ("alice", alice)}, retried={(CHAT, 3)})
    assert (retried.disorder, retried.late) == ([], [("a", CHAT, 3)])
    assert retried.clean
    other = check(COMMITTED, MEMBERS, {"a": ("alice", alice)}, retried={(CHAT, 5)})
    assert (other.disorder, other.late) == ([("a", CHAT, 3)], [])


def test_a_gap_left_by_a_retried_row_is_late_and_one_left_by_a_row_pushed_once_silent() -> None:
    dropped = [*every(1, 2, 4), Connected(), *every(3, *range(5, 11))]  # recovered later
    retried = check(COMMITTED, MEMBERS, {"a": ("alice", dropped)}, retried={(CHAT, 3)})
    assert (retried.silent, retried.late, retried.lost) == ([], [("a", CHAT, 3)], [])
    once = check(COMMITTED, MEMBERS, {"a": ("alice", dropped)}, retried={(CHAT, 4)})
    assert (once.silent, once.late) == ([("a", CHAT, 3)], [])
    never = [*every(1, 2, 4, *range(5, 11))]  # a retried row never delivered is still lost
    lost = check(COMMITTED, MEMBERS, {"a": ("alice", never)}, retried={(CHAT, 3)})
    assert lost.lost == [("a", CHAT, 3)] and not lost.clean


def test_before_its_recover_completed_a_connection_may_interleave_live_and_recovered() -> None:
    # Live 5 came before the client's Recover reached the hub; the recovered 3 and 4
    # follow it. After the completion, everything must be above what came before.
    early = [*every(1, 2), Connected(), *every(5, 3, 4), Recovered()]
    clean = check(COMMITTED, MEMBERS, {"a": ("alice", [*early, *every(*range(6, 11))])})
    assert clean.disorder == [] and clean.lost == []
    late = check(COMMITTED, MEMBERS, {"a": ("alice", [*early, *every(7, 6, 8, 9, 10)])})
    assert late.disorder == [("a", CHAT, 6)]


def test_a_resync_covers_only_up_to_the_offset_rest_said() -> None:
    alice = [*every(1, 2), Connected(), Told(CHAT, 5), *every(9, 10)]
    found = check(COMMITTED, MEMBERS, {"a": ("alice", alice)})
    assert found.lost == [("a", CHAT, 6), ("a", CHAT, 7), ("a", CHAT, 8)]


def test_the_join_and_leave_events_may_arrive_or_not_and_between_is_owed() -> None:
    # Alice joined with offset 3 and left with offset 8: 4..7 are owed, 3 and 8 optional.
    members = [Membership("alice", CHAT, joined=3, left=8)]
    with_both = check(COMMITTED, members, {"a": ("alice", every(3, 4, 5, 6, 7, 8))})
    without = check(COMMITTED, members, {"a": ("alice", every(4, 5, 6, 7))})
    assert with_both.clean and without.clean and not with_both.lost and not without.lost
    history = check(COMMITTED, members, {"a": ("alice", every(2, 4, 5, 6, 7))})
    assert history.clean  # a member may read what came before she joined (REST gives it)
    late = check(COMMITTED, members, {"a": ("alice", every(4, 5, 6, 7, 9))})
    assert late.foreign == [("a", CHAT, 9)]  # after she left
    short = check(COMMITTED, members, {"a": ("alice", every(4, 5, 7))})
    assert short.lost == [("a", CHAT, 6)] and short.silent == [("a", CHAT, 6)]


def test_what_was_committed_between_leaving_and_joining_again_is_no_gap() -> None:
    members = [Membership("alice", CHAT, left=3), Membership("alice", CHAT, joined=7)]
    found = check(COMMITTED, members, {"a": ("alice", every(1, 2, 8, 9, 10))})
    assert found.clean and found.summary()["silent"] == 0 and not found.lost


def test_an_owed_event_read_after_the_removal_is_withheld_not_lost() -> None:
    # Bob left with offset 8, committed at t=100. Offset 7 was committed before, but its
    # row ended Done at t=101 (read after the removal): the hub withholds it by design.
    # Offset 6 was Done at t=99, before the removal: it was owed and is lost.
    members = [Membership("bob", CHAT, left=8, left_at=100.0)]
    done_at = {(CHAT, offset): 90.0 + offset for offset in range(1, 6)}
    done_at.update({(CHAT, 6): 99.0, (CHAT, 7): 101.0})
    found = check(COMMITTED, members, {"b": ("bob", every(1, 2, 3, 4, 5))}, done_at)
    assert found.lost == [("b", CHAT, 6)]
    assert found.withheld == [("b", CHAT, 7)]


def test_a_loss_nothing_arrived_after_is_silent_unless_a_close_told_the_client() -> None:
    committed_at = {(CHAT, offset): 100.0 + offset for offset in range(1, 11)}
    quiet = every(*range(1, 9))  # 9 and 10 never came, and nothing came after them
    found = check(COMMITTED, MEMBERS, {"a": ("alice", quiet)}, committed_at=committed_at)
    assert found.lost == found.silent == [("a", CHAT, 9), ("a", CHAT, 10)]
    told = [*quiet, Closed(allow_reconnect=True, at=109.5)]  # after 9, before 10
    found = check(COMMITTED, MEMBERS, {"a": ("alice", told)}, committed_at=committed_at)
    assert found.lost == [("a", CHAT, 9), ("a", CHAT, 10)]
    assert found.silent == [("a", CHAT, 10)]  # the Close told it of 9 only


def test_an_entry_only_recoverable_after_the_user_was_removed_is_withheld_not_lost() -> None:
    """Recover and REST read the membership when asked: a client away when the entry was
    pushed (or told by a Close after it) and back only after its user's removal cannot
    have it. Back before the removal, or never told, it is still lost."""
    members = [Membership("alice", CHAT, left=8, left_at=100.0)]
    committed = [(CHAT, offset) for offset in range(1, 9)]
    done = {(CHAT, offset): 10.0 * offset for offset in range(1, 9)}  # 5 done at 50.0
    log = [*every(1, 2, 3, 4), Closed(True, at=45.0), Connected(at=120.0), *every(6, 7)]
    found = check(committed, members, {"a": ("alice", log)}, done_at=done)
    assert (found.lost, found.withheld) == ([], [("a", CHAT, 5)])
    back_in_time = [*every(1, 2, 3, 4), Closed(True, at=45.0), Connected(at=60.0), *every(6)]
    found = check(committed, members, {"a": ("alice", back_in_time)}, done_at=done)
    assert ("a", CHAT, 5) in found.lost  # it could have recovered it: owed
    never_told = [*every(1, 2, 3, 4, 6, 7)]
    found = check(committed, members, {"a": ("alice", never_told)}, done_at=done)
    assert ("a", CHAT, 5) in found.lost
