"""Chat rosters: who is in a chat now, read once per process per membership change.

When a chat's membership version moves (someone added or removed), every local
connection of that chat sees its next event at a version newer than the one it read its
memberships at, and used to re-read all of its own memberships before deciding: a
domain read per connection (53 reads of the participant table to add one member to a
chat of 50 connected members). Instead a connection that holds the chat asks this
process's Rosters: one read of the chat's active members and version
(DomainPort.chat_roster), shared by every connection that asks while it runs and kept
for the next ones. A connection whose user is on the roster only moves its held version
on (a set lookup); one whose user is not (removed), or that did not hold the chat
(added), re-reads its own memberships as before. So the work is one read per process and
change, plus one per connection concerned.
"""

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from uuid import UUID

from messenger_realtime.contracts.port import ChatRoster, get_domain_port
from messenger_realtime.hub.reads import hub_read

CACHED_CHATS = 4096  # rosters kept per process (the least recently asked go first)
Reader = Callable[[UUID], Awaitable[ChatRoster | None]]


class Rosters:
    """The rosters one process has read, newest per chat, and the reads in flight."""

    def __init__(self, read: Reader, size: int = CACHED_CHATS) -> None:
        self._read, self.size = read, size
        self._cache: OrderedDict[UUID, ChatRoster] = OrderedDict()
        self._reading: dict[UUID, asyncio.Future[ChatRoster | None]] = {}
        self.reads = 0  # domain reads made (for tests and benches)

    async def at_least(self, chat: UUID, version: int) -> ChatRoster | None:
        """The chat's roster at `version` or newer; None when the port cannot tell (the
        caller then reads the connection's memberships itself)."""
        cached = self._cache.get(chat)
        if cached is not None and cached.version >= version:
            self._cache.move_to_end(chat)
            return cached
        roster = await self._shared_read(chat)
        if roster is not None and roster.version < version:
            # A read that began before this version committed: read once more.
            roster = await self._shared_read(chat)
        return roster

    async def _shared_read(self, chat: UUID) -> ChatRoster | None:
        pending = self._reading.get(chat)
        if pending is None:
            pending = self._reading[chat] = asyncio.ensure_future(self._read_and_keep(chat))
        return await asyncio.shield(pending)

    async def _read_and_keep(self, chat: UUID) -> ChatRoster | None:
        try:
            self.reads += 1
            roster = await self._read(chat)
        finally:
            self._reading.pop(chat, None)
        if roster is not None:
            known = self._cache.get(chat)
            if known is None or roster.version >= known.version:
                self._cache[chat] = roster
                self._cache.move_to_end(chat)
                while len(self._cache) > self.size:
                    self._cache.popitem(last=False)
        return roster


@hub_read
def read_roster(chat: UUID) -> ChatRoster | None:
    """The domain's roster of `chat` (the Reader of a process's Rosters: hub/process.py)."""
    return get_domain_port().chat_roster(chat)
