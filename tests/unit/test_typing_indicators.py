"""Typing indicators' parts without I/O (hub/connection/composing.py, hub/inbox.py): the
collapse per chat, the blockers read at most once a minute, who is shown an indicator,
and an inbox that drops a volatile message first and never overruns for one."""

import asyncio
import uuid
from typing import Any

import pytest

from messenger_realtime.contracts.port import ChatRoster
from messenger_realtime.hub.connection.composing import (
    BLOCKERS_MAX_AGE,
    TYPING_CHATS,
    TYPING_INTERVAL,
    TYPING_TYPE,
    Composing,
    claim_in,
    shown,
)
from messenger_realtime.hub.connection.membership import ChatMemberships
from messenger_realtime.hub.inbox import OVERRUN_MESSAGE, VOLATILE, VOLATILE_ROOM, Inbox
from messenger_realtime.hub.rosters import Rosters


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def time(self) -> float:
        return self.now

    def __call__(self) -> float:
        return self.now


class Layer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, message))


def test_calls_within_the_interval_publish_once_per_chat() -> None:
    clock, layer, reads = Clock(), Layer(), []
    typist, chat, other = uuid.uuid4(), str(uuid.uuid4()), str(uuid.uuid4())

    async def read(chat: uuid.UUID, user_id: uuid.UUID, blockers: bool) -> Any:
        reads.append((str(chat), blockers))
        return 3, [] if blockers else None

    part = Composing(typist, loop=clock, layer=layer, claim=claim_in(""), read=read)

    async def keystroke(chat: str) -> None:
        if part.due(chat):
            await part.publish(chat, await part.read(chat))

    async def keystrokes() -> None:
        for _ in range(50):
            await keystroke(chat)
            clock.now += TYPING_INTERVAL / 100
        await keystroke(other)  # another chat has its own interval
        clock.now += TYPING_INTERVAL
        await keystroke(chat)

    asyncio.run(keystrokes())
    assert [group for group, _ in layer.sent] == [f"chat.{chat}", f"chat.{other}", f"chat.{chat}"]
    _, message = layer.sent[0]
    assert message["type"] == TYPING_TYPE and message[VOLATILE] is True
    assert message["membership_version"] == 3 and message["user"] == str(typist)
    assert message["event"] == "typing"
    assert message["payload"]["chatId"] == chat and message["payload"]["userId"] == str(typist)
    # One read per publish; who blocked the typist only in the first.
    assert reads == [(chat, True), (other, False), (chat, False)]


def test_a_connection_publishes_in_a_few_chats_at_once_not_in_every_chat_it_holds() -> None:
    """Each publish is a domain read on the hub's one read thread: a client calling Typing
    for each of its thousand chats in turn must not make a thousand reads every interval
    (one user would slow every other user's connect), so a connection publishes in at
    most TYPING_CHATS chats per interval."""
    clock = Clock()
    part = Composing(uuid.uuid4(), loop=clock, layer=Layer(), claim=claim_in(""))
    chats = [str(uuid.uuid4()) for _ in range(100)]
    assert sum(part.due(chat) for chat in chats) == TYPING_CHATS
    clock.now += TYPING_INTERVAL
    assert sum(part.due(chat) for chat in chats[50:]) == TYPING_CHATS  # the next interval


def test_who_blocked_the_typist_is_read_again_after_a_minute() -> None:
    clock, layer = Clock(), Layer()
    blocker = uuid.uuid4()
    answers = [[], [blocker]]

    async def read(chat: uuid.UUID, user_id: uuid.UUID, blockers: bool) -> Any:
        return 1, answers.pop(0) if blockers else None

    part = Composing(uuid.uuid4(), loop=clock, layer=layer, claim=claim_in(""), read=read)
    chat = str(uuid.uuid4())

    async def typing() -> None:
        for step in (0, BLOCKERS_MAX_AGE - 1, 1):
            clock.now += step
            await part.publish(chat, await part.read(chat))

    asyncio.run(typing())
    assert [m["blockers"] for _, m in layer.sent] == [[], [], [str(blocker)]]


def message(typist: uuid.UUID, chat: uuid.UUID, version: int, blockers: Any = ()) -> Any:
    return {
        "user": str(typist),
        "chat": str(chat),
        "membership_version": version,
        "blockers": [str(b) for b in blockers],
    }


def holding(chat: uuid.UUID, version: int) -> ChatMemberships:
    memberships = ChatMemberships()
    memberships.update({chat: version})
    return memberships


@pytest.fixture
def no_reads() -> Rosters:
    async def read(chat: uuid.UUID) -> ChatRoster | None:
        raise AssertionError("a roster read where none is needed")

    return Rosters(read)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("same version", True),
        ("own user", False),
        ("blocked the typist", False),
        ("does not hold the chat", False),
        ("behind the typist's version", False),
    ],
)
def test_who_is_shown_a_typing_indicator_without_reading(
    no_reads: Rosters, case: str, expected: bool
) -> None:
    typist, viewer, chat = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    sent = message(typist, chat, 4, blockers=[viewer] if case == "blocked the typist" else [])
    me = typist if case == "own user" else viewer
    held = {
        "does not hold the chat": holding(uuid.uuid4(), 4),
        "behind the typist's version": holding(chat, 3),
    }.get(case, holding(chat, 4))
    assert asyncio.run(shown(sent, str(me), held, no_reads)) is expected


@pytest.mark.parametrize("still_in", [True, False])
def test_a_viewer_ahead_of_the_typist_asks_the_roster_whether_the_typist_is_still_in(
    still_in: bool,
) -> None:
    typist, viewer, chat = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    members = frozenset({viewer, typist} if still_in else {viewer})

    async def read(asked: uuid.UUID) -> ChatRoster:
        assert asked == chat
        return ChatRoster(version=5, members=members)

    sent = message(typist, chat, 4)
    assert asyncio.run(shown(sent, str(viewer), holding(chat, 5), Rosters(read))) is still_in


def inbox(capacity: int = 3) -> Inbox:
    made = Inbox(capacity, lambda delta: None)
    made.start_draining()
    return made


TYPING = {"type": TYPING_TYPE, VOLATILE: True}


def event(n: int) -> dict[str, Any]:
    return {"type": "realtime.event", "n": n}


def test_a_volatile_message_never_queues_behind_a_real_one() -> None:
    box = inbox()
    box.put(TYPING)
    box.put(event(1))
    box.put(TYPING)  # behind an event: dropped
    assert box.take_now(10) == [TYPING, event(1)]
    box.put(event(2))
    box.put(TYPING)
    assert box.take_now(10) == [event(2)]


def test_several_typing_at_once_all_wait_in_an_inbox_with_nothing_else_up_to_its_room() -> None:
    """Members typing at once reach a connection that keeps up (the bench's burst lost
    60 % of them when an inbox took one volatile message at most)."""
    box = inbox(capacity=100)
    for _ in range(3):
        box.put(TYPING)
    assert box.take_now(10) == [TYPING] * 3
    for _ in range(VOLATILE_ROOM + 5):
        box.put(TYPING)
    assert len(box.take_now(VOLATILE_ROOM + 5)) == VOLATILE_ROOM


def test_a_volatile_message_gives_way_to_an_event_at_capacity() -> None:
    box = inbox(capacity=3)
    box.put(TYPING)
    for n in range(3):
        box.put(event(n))
    assert box.take_now(10) == [event(0), event(1), event(2)]  # no overrun
    for n in range(4):
        box.put(event(n))
    assert box.take_now(10) == [OVERRUN_MESSAGE]  # events alone still overrun


def test_nothing_volatile_waits_for_a_connection_that_does_not_drain_yet() -> None:
    box = Inbox(3, lambda delta: None)
    box.put(TYPING)
    assert len(box) == 0
