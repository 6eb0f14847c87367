"""Which chats a connection may receive, checked at delivery against membership versions.

The host raises a chat's membership version in the same transaction as every participant
it adds or removes (DomainPort.membership_versions); the worker reads the versions of a
batch's chats when it builds the batch and puts each on its chat events
(`membership_version` in the Channels message, never in the payload). A connection
remembers the version each of its chats had when it last read its memberships. An event
whose version is newer than that was read after a membership change this connection has
not seen: the consumer re-reads its memberships (one domain read) before deciding. So a
member removed by a committed transaction gets no chat event read after that commit, with
or without the fast path, and the check per event is a dict lookup and a comparison.
"""

from collections.abc import Mapping
from enum import Enum
from uuid import UUID


class Verdict(Enum):
    FORWARD = "forward"
    DROP = "drop"
    RESYNC = "resync"  # read the memberships again, then ask once more


class ChatMemberships:
    """A connection's chats, each with the membership version it was read at."""

    def __init__(self) -> None:
        self.ids: frozenset[UUID] = frozenset()
        self.held: dict[str, int] = {}  # chat id (as events name it) -> version read at
        # Chats this connection got events of but does not hold: the newest version at
        # which a read said so (a stale layer group, or a join the domain undid since).
        self.outside: dict[str, int] = {}

    def verdict(self, chat: str, version: int | None) -> Verdict:
        """For a chat event of `chat` read at membership `version` (None: unversioned,
        trust the held set as it is)."""
        held = self.held.get(chat)
        if version is None:
            return Verdict.FORWARD if held is not None else Verdict.DROP
        if held is not None:
            return Verdict.FORWARD if version <= held else Verdict.RESYNC
        seen = self.outside.get(chat)
        return Verdict.DROP if seen is not None and version <= seen else Verdict.RESYNC

    def update(self, current: Mapping[UUID, int]) -> tuple[set[UUID], set[UUID]]:
        """Take a fresh read (chat -> version); returns (left, joined)."""
        left, joined = set(self.ids - current.keys()), set(current.keys() - self.ids)
        self.ids = frozenset(current)
        self.held = {str(chat): version for chat, version in current.items()}
        for chat in self.held:
            self.outside.pop(chat, None)
        return left, joined

    def advance(self, chat: str, version: int) -> None:
        """A roster read at `version` still lists this user in a chat it holds: hold
        it at that version (nothing else about its memberships is known to change)."""
        if self.held.get(chat, version) < version:
            self.held[chat] = version

    def settle(self, chat: str, version: int | None) -> Verdict:
        """After a read prompted by an event of `chat` at `version`: deliver it if the
        chat is held at that version or newer; otherwise remember not to read again for
        it (or for anything older)."""
        held = self.held.get(chat)
        if held is not None and (version is None or version <= held):
            return Verdict.FORWARD
        if held is None and version is not None:
            self.outside[chat] = max(version, self.outside.get(chat, version))
        return Verdict.DROP
