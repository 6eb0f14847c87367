"""Typing indicators: what a connection publishes while its user composes in a chat, and
whether a connection shows someone else's.

A typing indicator is volatile: never written to PostgreSQL or the outbox, never given a
stream offset, never recovered or replayed after a reconnect, never counted as a loss. It
is the first thing dropped under backpressure (Mattermost's lesson: typing events that
crowd out real ones on a slow connection): one never enters an inbox that holds anything
and gives way to a real event there (hub/inbox.py, VOLATILE), and goes out only to a
connection with nothing waiting to reach its client (Outbound.backlogged), so a typing
flood never causes an overrun or a send-buffer close of a real event stream.

Cost, for a client that calls Typing on every keystroke: each call is a dict lookup or
two on its own connection (the method is not charged to the Redis invocation rate
limit: methods/typing_indicator.py); at most one publish per chat per TYPING_INTERVAL
per connection (one channel-layer group_send to the chat's group, which the receiving
processes fan out locally); the users who blocked the typist read at most once per
BLOCKERS_MAX_AGE per connection (one domain read, off the event loop).

Membership, as for events: the typist's connection must hold the chat (the Typing
method refuses otherwise) and puts the membership version it holds it at on the
message; a receiver shows it only if it holds the chat at that same version, or at a
newer one whose roster (hub/rosters.py, one read per process and change) still lists the
typist. So a connection that has seen a member's removal never shows that member's
typing, and one that was removed (its held version behind, or the chat gone) shows no
one's. A receiver never shows its own user's typing, nor that of a typist its user
blocked (`blockers`: who blocked the typist, read on the typist's side through the port's
`users_blocking`, so receivers read nothing).
"""

import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any
from uuid import UUID

from messenger_realtime.backplane.groups import layer_group
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.hub.connection.membership import ChatMemberships
from messenger_realtime.hub.inbox import VOLATILE
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.hub.rosters import Rosters
from messenger_realtime.ops import metrics

TYPING_TYPE = "realtime.typing"  # the Channels message type (events.py, HANDLERS)
TYPING_EVENT = "typing"  # the hub event clients get
TYPING_INTERVAL = 3.0  # s: at most one publish per chat per connection in this time
TYPING_TTL = 5.0  # s: how long a client shows an indicator without another (`until`)
BLOCKERS_MAX_AGE = 60.0  # s a connection's read of who blocked its user is used for
_PRUNE_AT = 64  # publish times kept before the stale ones are forgotten

Read = Callable[[UUID], Awaitable[Collection[UUID]]]


@hub_read
def read_users_blocking(user_id: UUID) -> Collection[UUID]:
    """Who blocked `user_id` (DomainPort.users_blocking), read on the hub's read thread."""
    return get_domain_port().users_blocking(user_id)


class Composing:
    """A connection's typing indicators: when it last published in each chat, and who
    blocked its user (as last read). A part of HubConnection; it is handed its user, the
    loop's clock, the channel layer and the read it makes, never its connection."""

    __slots__ = ("_blockers", "_layer", "_now", "_published", "_read", "_read_at", "user_id")

    def __init__(
        self,
        user_id: UUID,
        *,
        now: Callable[[], float],
        layer: Any,
        read: Read = read_users_blocking,
    ) -> None:
        self.user_id = user_id
        self._now, self._layer, self._read = now, layer, read  # now: the loop's time
        self._published: dict[str, float] = {}  # chat -> loop time of its last publish
        self._blockers: list[str] = []
        self._read_at: float | None = None  # loop time of the last read of blockers

    def due(self, chat: str) -> bool:
        """Whether a call for `chat` publishes now (and, if so, it counts as published):
        once per TYPING_INTERVAL; the calls in between cost this lookup only."""
        now = self._now()
        last = self._published.get(chat)
        if last is not None and now - last < TYPING_INTERVAL:
            metrics.hub_typing.labels(outcome="collapsed").inc()
            return False
        if len(self._published) >= _PRUNE_AT:  # only chats it held: bounded, but forget old
            self._published = {
                c: t for c, t in self._published.items() if now - t < TYPING_INTERVAL
            }
        self._published[chat] = now
        return True

    async def publish(self, chat: str, version: int) -> None:
        """Tell the chat's other members' connections (one group_send): who types, in
        which chat, until when, at which membership version the typist holds it, and who
        must not be shown it."""
        message = {
            "type": TYPING_TYPE,
            VOLATILE: True,
            "chat": chat,
            "membership_version": version,
            "user": str(self.user_id),
            "blockers": await self._blocking(),
            "event": TYPING_EVENT,
            "payload": {
                "chatId": chat,
                "userId": str(self.user_id),
                "until": round(time.time() + TYPING_TTL, 3),  # the clients' clock: unix s
            },
        }
        # The hub's Redis layer never lets it take a real event's room (nor report it lost
        # when it is dropped: backplane/pipeline.py); other layers send it as any message.
        send = getattr(self._layer, "group_send_volatile", None) or self._layer.group_send
        await send(layer_group(HubTarget.chat(UUID(chat))), message)
        metrics.hub_typing.labels(outcome="published").inc()

    async def _blocking(self) -> list[str]:
        """Who blocked this user: read at most once per BLOCKERS_MAX_AGE (a block made
        meanwhile hides the typing from then on, within that time). A connection runs
        its invocations one at a time, so two reads never overlap."""
        now = self._now()
        if self._read_at is None or now - self._read_at >= BLOCKERS_MAX_AGE:
            self._blockers = sorted(str(user) for user in await self._read(self.user_id))
            self._read_at = now
        return self._blockers


async def shown(
    message: dict[str, Any], user_id: str, memberships: ChatMemberships, rosters: Rosters
) -> bool:
    """Whether a connection of `user_id` that holds `memberships` shows this typing
    indicator (the module's docstring says why each rule)."""
    if message["user"] == user_id or user_id in message["blockers"]:
        return False
    chat, version = message["chat"], message["membership_version"]
    held = memberships.held.get(chat)
    if held is None or held < version:
        # Not a member, or this connection has not seen a change the typist has (it may
        # have been removed): events would read the domain here; typing is not worth it.
        return False
    if held == version:
        return True
    # The receiver saw a membership change the typist's connection had not: is the
    # typist still in? (The roster is usually cached: the change's own event read it.)
    roster = await rosters.at_least(UUID(chat), held)
    return roster is not None and UUID(message["user"]) in roster.members
