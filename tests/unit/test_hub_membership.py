"""ChatMemberships: the per-event membership verdict from versions alone (pure)."""

from uuid import UUID

from messenger_realtime.hub.connection.membership import ChatMemberships, Verdict

CHAT = UUID(int=1)
OTHER = UUID(int=2)


def held_at(version: int) -> ChatMemberships:
    memberships = ChatMemberships()
    memberships.update({CHAT: version})
    return memberships


def test_an_event_at_or_below_the_version_read_is_forwarded_and_a_newer_one_rereads() -> None:
    memberships = held_at(4)
    assert memberships.verdict(str(CHAT), 4) is Verdict.FORWARD
    assert memberships.verdict(str(CHAT), 3) is Verdict.FORWARD
    assert memberships.verdict(str(CHAT), 5) is Verdict.RESYNC


def test_unversioned_events_follow_the_held_set() -> None:
    memberships = held_at(1)
    assert memberships.verdict(str(CHAT), None) is Verdict.FORWARD
    assert memberships.verdict(str(OTHER), None) is Verdict.DROP


def test_a_read_that_no_longer_holds_the_chat_drops_it_and_remembers_the_version() -> None:
    memberships = held_at(4)
    assert memberships.update({}) == ({CHAT}, set())
    assert memberships.settle(str(CHAT), 5) is Verdict.DROP
    assert memberships.verdict(str(CHAT), 5) is Verdict.DROP  # no second read for it
    assert memberships.verdict(str(CHAT), 6) is Verdict.RESYNC  # a later change might add


def test_a_chat_not_held_rereads_and_is_forwarded_once_the_read_holds_it() -> None:
    memberships = ChatMemberships()
    assert memberships.verdict(str(CHAT), 2) is Verdict.RESYNC
    assert memberships.update({CHAT: 2}) == (set(), {CHAT})
    assert memberships.settle(str(CHAT), 2) is Verdict.FORWARD
    assert memberships.ids == frozenset({CHAT})


def test_a_read_older_than_the_event_does_not_forward_it() -> None:
    memberships = ChatMemberships()
    memberships.update({CHAT: 1})
    assert memberships.settle(str(CHAT), 2) is Verdict.DROP
