"""A connection's layer groups: its user group, the chats the domain says it holds, and
the presence groups of the users it watches (hub/presence/).
A part of HubConnection; the membership rules themselves are in membership.py, and the
process (not the connection) is the layer's group member (hub/fanout.py).

Groups owns what it holds (its ChatMemberships), its inbox and whether it joined or left
them; it knows its user and, of its connection, only its process's fan-out over its
channel layer and its rosters (`Owner`, below: the one reference it is handed when
made). It never reads its connection's state: a connection that ends leaves its groups
(leave_all), and a join still running then sees that and leaves again.
"""

import asyncio
from collections.abc import Collection, Mapping
from typing import Any, Protocol
from uuid import UUID

from messenger_realtime.backplane.group_names import layer_group, presence_group
from messenger_realtime.backplane.reservations import USED, ConnectionReservation
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.connection.membership import ChatMemberships, Verdict
from messenger_realtime.hub.credentials.sessions import session_holds
from messenger_realtime.hub.credentials.tokens import Identity, require_standing
from messenger_realtime.hub.fanout import Fanout
from messenger_realtime.hub.inbox import Inbox
from messenger_realtime.hub.presence.visibility import NOTHING, Watch
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.hub.rosters import Rosters


class Shared(Protocol):
    """Its process (hub/process.HubProcess), as Groups uses it: what its event loop runs
    for every connection."""

    def fanout(self, layer: Any) -> Fanout: ...

    def rosters(self) -> Rosters: ...


class Owner(Protocol):
    """Its connection (lifecycle.HubConnection), as Groups reads it: its process and its
    channel layer, read-only here."""

    @property
    def hub(self) -> Shared: ...

    @property
    def channel_layer(self) -> Any: ...


class Groups:
    """A connection's groups: what it holds (its ChatMemberships), the inbox the
    process's reader fills for it, and joining and leaving as the domain says."""

    __slots__ = (
        "_inbox",
        "_owner",
        "admitted",
        "left",
        "memberships",
        "session_lost",
        "user_id",
        "watching",
    )

    def __init__(
        self,
        user_id: UUID,
        *,
        owner: Owner,
    ) -> None:
        self.user_id = user_id
        # Its process's, on its loop (HubProcess.fanout over its layer, HubProcess.rosters).
        self._owner = owner
        self.memberships = ChatMemberships()
        self._inbox: Inbox | None = None
        self.admitted = False  # admit() read its memberships and joined its groups
        self.session_lost = False  # admit() found its Django session ended (told later)
        self.left = False  # leave_all() ran: its connection ended, nothing is joined again
        self.watching = NOTHING  # the users whose presence it is told of (hub/presence/)

    @property
    def fanout(self) -> Fanout:
        owner = self._owner
        return owner.hub.fanout(owner.channel_layer)

    @property
    def inbox(self) -> Inbox:
        """What the process's reader hands this connection (made at first use)."""
        if self._inbox is None:
            self._inbox = self.fanout.inbox()
        return self._inbox

    @property
    def chats(self) -> frozenset[UUID]:
        return self.memberships.ids

    async def deliverable(self, chat: str, version: int | None) -> bool:
        """Whether a chat event (of `chat`, read at membership `version`) may go out: a
        dict lookup, or one domain read when the event is newer than what this
        connection read its memberships at."""
        verdict = self.memberships.verdict(chat, version)
        if verdict is Verdict.RESYNC and version is not None and chat in self.memberships.held:
            # Held, at an older version: one roster read per process, not one per
            # connection, says whether this user is still in (hub/rosters.py).
            roster = await self._owner.hub.rosters().at_least(UUID(chat), version)
            if roster is not None and self.user_id in roster.members:
                self.memberships.advance(chat, roster.version)
                return True
        if verdict is Verdict.RESYNC:
            await self.sync()
            verdict = self.memberships.settle(chat, version)
            if chat not in self.memberships.held:
                # A join the domain undid since (copied into the chat's group through the
                # user's): stop getting these.
                chat_group = layer_group(HubTarget.chat(UUID(chat)))
                user_group = layer_group(HubTarget.user(self.user_id))
                await self.fanout.forget_copy(chat_group, user_group)
        return verdict is Verdict.FORWARD

    async def admit(
        self, identity: Identity, token: str | None, claim: ConnectionReservation | None
    ) -> None:
        """Before a new connection is accepted: join its user's group and make its
        token's `claim` (one Redis round trip), then read in one thread hop (one
        database round trip each) that the user may connect (standing, revocation), its
        chats and, for a Django session, that the session still holds; join the chats'
        groups (one Redis round trip). InvalidToken when refused (the caller ends the
        connection, which leaves its groups: transports/opening.py). The handshake then
        has nothing to read.

        The user's group comes first: a membership change or a logout committed after
        the reads is heard through it (its message waits in the inbox until the
        handshake has been answered)."""
        fanout, inbox = self.fanout, self.inbox
        user_group = layer_group(HubTarget.user(self.user_id))
        if not await fanout.join_many([user_group], inbox, claim):
            raise InvalidToken(USED)
        current, self.session_lost = await _admission_reads(identity, token)
        self.memberships.update(current)
        await fanout.join_many([layer_group(HubTarget.chat(c)) for c in current], inbox)
        self.admitted = True
        if self.left:  # its connection ended while this ran: leave what it just joined
            await self.leave_all()

    async def join_all(self) -> None:
        """At the handshake of a connection that was not admitted (admit()): its user's
        group, then its chats' (sync)."""
        await self.fanout.join(layer_group(HubTarget.user(self.user_id)), self.inbox)
        await self.sync()

    async def sync(self) -> None:
        """Rebuild the chat groups from the domain."""
        fanout, inbox = self.fanout, self.inbox
        current = await _active_chats(self.user_id)
        # Stop forwarding a left chat before anything else.
        left, joined = self.memberships.update(current)
        await fanout.leave_many([layer_group(HubTarget.chat(c)) for c in left], inbox)
        await fanout.join_many([layer_group(HubTarget.chat(c)) for c in joined], inbox)
        if self.left:  # its connection ended while this ran: leave what it may have joined
            await self.leave_all()

    async def watch(self, users: frozenset[UUID]) -> None:
        """Be told of these users' presence changes, and no longer of the others': their
        presence groups joined (one round trip for those this process lacks) and left.
        The caller checked that it may see them (now)."""
        if self.left:
            return
        fanout, inbox = self.fanout, self.inbox
        dropped, added = self.watching.users - users, users - self.watching.users
        self.watching = Watch(users, asyncio.get_running_loop().time())
        await fanout.leave_many([presence_group(u) for u in dropped], inbox)
        await fanout.join_many([presence_group(u) for u in added], inbox)
        if self.left:  # its connection ended while this ran: leave what it just joined
            await self.leave_all()

    async def unwatch(self, user: UUID) -> None:
        """No longer be told of `user`'s changes (it may not see them any more)."""
        if user in self.watching.users:
            self.watching = self.watching.without(user)
            await self.fanout.leave(presence_group(user), self.inbox)

    async def leave_all(self) -> None:
        """Leave every group (whether or not the handshake finished) and drop what waits
        in the inbox: nothing reads it any more (its connection ended)."""
        self.left = True
        groups = self._layer_groups(self.chats)
        groups += [presence_group(user) for user in self.watching.users]
        await self.fanout.leave_many(groups, self.inbox)
        self.inbox.close()

    def _layer_groups(self, chats: Collection[UUID]) -> list[str]:
        targets = [HubTarget.user(self.user_id), *(HubTarget.chat(c) for c in chats)]
        return [layer_group(t) for t in targets]


@hub_read
def _admission_reads(identity: Identity, token: str | None) -> tuple[Mapping[UUID, int], bool]:
    """admit()'s reads: (chat -> membership version, whether the Django session the
    connection came with has ended since). The standing and the chats in one statement."""
    standing, chats = get_domain_port().standing_and_chats(identity.user_id)
    require_standing(standing, identity, token)
    key = identity.session_key
    return chats, key is not None and not session_holds(key, identity.user_id)


@hub_read
def _active_chats(user_id: UUID) -> Mapping[UUID, int]:
    return get_domain_port().active_chats(user_id)
