"""A process's chat rosters: one read shared by every connection that asks while it runs,
kept for later ones, read again when older than the version asked for, bounded."""

import asyncio
import uuid

from messenger_realtime.contracts.port import ChatRoster
from messenger_realtime.hub.rosters import Rosters

CHAT = uuid.uuid4()
ALICE, BOB = uuid.uuid4(), uuid.uuid4()


def test_concurrent_askers_share_one_read_and_later_ones_use_what_it_kept() -> None:
    release = asyncio.Event()
    reads: list[uuid.UUID] = []

    async def read(chat: uuid.UUID) -> ChatRoster:
        reads.append(chat)
        await release.wait()
        return ChatRoster(5, frozenset({ALICE}))

    async def scenario() -> list[ChatRoster | None]:
        rosters = Rosters(read)
        askers = [asyncio.ensure_future(rosters.at_least(CHAT, 5)) for _ in range(30)]
        await asyncio.sleep(0)  # let every asker reach the read in flight
        release.set()
        found = await asyncio.gather(*askers)
        return [*found, await rosters.at_least(CHAT, 4), await rosters.at_least(CHAT, 5)]

    found = asyncio.run(scenario())
    assert reads == [CHAT]
    assert {r.members for r in found if r is not None} == {frozenset({ALICE})}


def test_a_roster_older_than_the_version_asked_for_is_read_again() -> None:
    versions = iter([3, 4])

    async def read(chat: uuid.UUID) -> ChatRoster:
        return ChatRoster(next(versions), frozenset({ALICE, BOB}))

    async def scenario() -> tuple[int, int]:
        rosters = Rosters(read)
        roster = await rosters.at_least(CHAT, 4)  # the first read says 3: stale
        assert roster is not None
        return roster.version, rosters.reads

    assert asyncio.run(scenario()) == (4, 2)


def test_a_port_that_cannot_tell_gives_none_and_the_cache_stays_bounded() -> None:
    async def unknown(chat: uuid.UUID) -> None:
        return None

    async def known(chat: uuid.UUID) -> ChatRoster:
        return ChatRoster(1, frozenset())

    async def scenario() -> tuple[ChatRoster | None, int]:
        assert await Rosters(unknown).at_least(CHAT, 1) is None
        bounded = Rosters(known, size=3)
        chats = [uuid.uuid4() for _ in range(5)]
        for chat in chats:
            await bounded.at_least(chat, 1)
        await bounded.at_least(chats[0], 1)  # evicted: read again
        return await bounded.at_least(chats[-1], 1), bounded.reads

    roster, reads = asyncio.run(scenario())
    assert roster == ChatRoster(1, frozenset()) and reads == 6
