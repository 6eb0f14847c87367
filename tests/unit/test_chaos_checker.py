"""The chaos soak's checker (bench/chaos_checker.py) finds each kind of violation it
names, names the client, stream and offset, and passes a clean run: a checker that
passes everything would make the soak prove nothing."""

import sys

from tests.support.runtime import ROOT

sys.path.insert(0, str(ROOT))
from bench.chaos_checker import Closed, Connected, Got, Membership, Told, check

CHAT = "chat:c1"
COMMITTED = [(CHAT, offset) for offset in range(1, 11)]
MEMBERS = [Membership("alice", CHAT, 1), Membership("bob", CHAT, 1)]


def run(**logs: list) -> dict:  # type: ignore[type-arg]
    clients = {name: (name, log) for name, log in logs.items()}
    return check(COMMITTED, MEMBERS, clients).summary()


def every(*offsets: int) -> list[Got]:
    return [Got(CHAT, offset) for offset in offsets]


def test_a_clean_run_with_a_reconnect_and_a_recovery_passes() -> None:
    live, recovered = every(1, 2, 3), every(4, 5, 6, 7)
    alice = [*live, Closed(allow_reconnect=True), Connected(), *recovered, *every(8, 9, 10)]
    assert run(alice=alice, bob=every(*range(1, 11))) == {
        "lost": 0, "foreign": 0, "silent": 0, "disorder": 0, "duplicates": 0,
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
    alice = [*every(1, 2), Closed(allow_reconnect=True), Connected(), Told(CHAT), *every(9, 10)]
    assert run(alice=alice, bob=every(*range(1, 11)))["lost"] == 0


def test_an_event_of_a_stream_the_user_was_not_in_at_that_offset_is_foreign() -> None:
    members = [Membership("alice", CHAT, 1, end=5), Membership("bob", CHAT, 1)]
    found = check(COMMITTED, members, {"a": ("alice", every(1, 2, 3, 4, 5))})
    assert found.foreign == [("a", CHAT, 5)]  # she had left before offset 5
    assert found.lost == []  # and nothing after she left is owed to her


def test_a_gap_is_silent_unless_the_hub_closed_with_allow_reconnect_or_said_resync() -> None:
    later = [Connected(), *every(3, *range(5, 11))]  # recovery fills the gap: nothing lost
    dropped = [*every(1, 2, 4), Connected(), *later[1:]]  # the socket just dropped
    summary = run(alice=dropped, bob=every(*range(1, 11)))
    assert (summary["lost"], summary["silent"]) == (0, 1)  # 3 skipped, nobody said so
    closed = [*every(1, 2, 4), Closed(allow_reconnect=True), *later]
    assert run(alice=closed, bob=every(*range(1, 11)))["silent"] == 0  # the hub said so


def test_out_of_order_within_a_connection_and_duplicates_are_counted() -> None:
    alice = every(1, 2, 4, 3, *range(5, 11), 10)
    found = check(COMMITTED, MEMBERS, {"a": ("alice", alice)})
    assert found.disorder == [("a", CHAT, 3)]
    assert found.duplicates == {"a": 1}
