"""Typing indicators: what a connection publishes while its user composes in a chat, and
whether a connection shows someone else's.

A typing indicator is volatile: never written to PostgreSQL or the outbox, never given a
stream offset, never recovered or replayed after a reconnect, never counted as a loss. It
is the first thing dropped under backpressure (Mattermost's lesson: typing events that
crowd out real ones on a slow connection): one never enters an inbox that holds anything
and gives way to a real event there (hub/inbox.py, VOLATILE), and goes out only to a
connection with nothing waiting to reach its client (Outbound.backlogged), so a typing
flood never causes an overrun or a send-buffer close of a real event stream.

Cost, for a client that calls Typing on every keystroke: each call is one unit of its
connection's budget and a dict lookup or two on its own connection (not charged to the
user's Redis invocation rate limit: methods/typing_indicator.py); at most one publish
per chat per TYPING_INTERVAL, in at most TYPING_CHATS chats per interval (a user types
in one chat at a time; a client cycling through all its chats gets no more reads), per
connection first (`due`, local) and then per user across all their connections and hub
processes (`claimed`: one Redis round trip, beside the rate limits, only for a call the
connection would publish): 32 connections of one user no longer publish 32 times. A
publish is one domain read off the event loop (the chat's membership version, and who
blocked the typist when that was read BLOCKERS_MAX_AGE ago or more) and one
channel-layer group_send to the chat's group, which the receiving processes fan out
locally.

Membership, as for events, whose version the worker reads after the owner's commit: the
typist's connection must hold the chat (the Typing method refuses otherwise) and reads
the chat's membership version as it publishes; newer than the one it holds, it settles
its own membership first as an event would make it (Groups.deliverable: the roster, or
its memberships read again), so a member removed by a committed transaction publishes
nothing after that commit. The message carries that version; a receiver shows it only
if it holds the chat at that same version, or at a newer one whose roster
(hub/rosters.py, one read per process and change) still lists the typist. A receiver
that has not caught up with the version yet (the change's own event is on its way)
shows nothing: it may have been removed.

A receiver never shows its own user's typing, nor that of a typist its user blocked
(`blockers`: who blocked the typist, read on the typist's side through the port's
`users_blocking`, so receivers read nothing).
"""

import functools
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol
from uuid import UUID

import redis

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.connection.membership import ChatMemberships
from messenger_realtime.hub.inbox import VOLATILE
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.hub.rosters import Rosters
from messenger_realtime.ops import metrics

TYPING_TYPE = "realtime.typing"  # the Channels message type (layer_messages.py, HANDLERS)
TYPING_EVENT = "typing"  # the hub event clients get
TYPING_INTERVAL = 3.0  # s: at most one publish per chat per connection in this time
TYPING_CHATS = 2  # chats a connection publishes in per TYPING_INTERVAL, at most
TYPING_TTL = 5.0  # s: how long a client shows an indicator without another (`until`)
BLOCKERS_MAX_AGE = 60.0  # s a connection's read of who blocked its user is used for
_PRUNE_AT = 64  # publish times kept before the stale ones are forgotten

# (chat, typist, whether to read who blocked the typist) -> (the chat's membership
# version, None if it has none; who blocked the typist, None when not asked)
Read = Callable[[UUID, UUID, bool], Awaitable[tuple[int | None, Collection[UUID] | None]]]
# (typist, chat) -> whether this publish is the user's own in the interval (`claimed`)
Claim = Callable[[UUID, str], Awaitable[bool]]

CLAIMS = "messenger_realtime:typing:{user}"  # chats a user published in lately, by time
# One user's publishes across every connection and process: KEYS[1]: the user's set;
# ARGV[1]: the chat, ARGV[2]: TYPING_INTERVAL in µs, ARGV[3]: TYPING_CHATS. 1 (and
# recorded) when the chat had no publish in the interval and fewer than TYPING_CHATS
# chats had; else 0. On Redis' clock, as the rate limits.
CLAIM = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local interval = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t - interval)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], t, ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(interval / 1000))
return 1
"""


@functools.cache
def claim_in(redis_url: str) -> Claim:
    """The user-wide claim against `redis_url` (RATE_LIMIT_REDIS_URL; empty: every call
    the connection would publish is let through), one per URL and process. Redis
    unreachable lets it through too: a typing indicator is not worth refusing for, as
    the rate limits say."""

    async def claimed(user_id: UUID, chat: str) -> bool:
        if not redis_url:
            return True
        try:
            script = ratelimit.registered_script(redis_url, CLAIM)
            interval_us = round(TYPING_INTERVAL * 1_000_000)
            keys = [CLAIMS.format(user=user_id)]
            return bool(await script(keys, [chat, interval_us, TYPING_CHATS]))
        except (redis.RedisError, OSError):
            return True

    return claimed


class Clock(Protocol):
    """What tells its time: its connection's event loop (loop.time())."""

    def time(self) -> float: ...


@hub_read
def read_for_publish(
    chat: UUID, user_id: UUID, blockers: bool
) -> tuple[int | None, Collection[UUID] | None]:
    """A publish's reads in one hop to the hub's read thread: the chat's membership
    version (DomainPort.membership_versions) and, when asked, who blocked the typist
    (DomainPort.users_blocking)."""
    port = get_domain_port()
    version = port.membership_versions([chat]).get(chat)
    return version, port.users_blocking(user_id) if blockers else None


class Composing:
    """A connection's typing indicators: when it last published in each chat, and who
    blocked its user (as last read). A part of HubConnection; it is handed its user, the
    event loop (its clock), the channel layer and the read it makes, never its
    connection."""

    __slots__ = (
        "_blockers",
        "_claim",
        "_layer",
        "_loop",
        "_published",
        "_read",
        "_read_at",
        "user_id",
    )

    def __init__(
        self,
        user_id: UUID,
        *,
        loop: Clock,
        layer: Any,
        claim: Claim,
        read: Read = read_for_publish,
    ) -> None:
        self.user_id = user_id
        self._loop, self._layer, self._read, self._claim = loop, layer, read, claim
        self._published: dict[str, float] = {}  # chat -> loop time of its last publish
        self._blockers: list[str] = []
        self._read_at: float | None = None  # loop time of the last read of blockers

    def due(self, chat: str) -> bool:
        """Whether a call for `chat` publishes now (and, if so, it counts as published):
        once per TYPING_INTERVAL, in at most TYPING_CHATS chats in that time (each
        publish is a read on the hub's one read thread, which every user's connect
        shares: a client calling Typing in each of its chats in turn reads no more); the
        calls in between cost this lookup only."""
        now = self._loop.time()
        last = self._published.get(chat)
        recent = sum(1 for t in self._published.values() if now - t < TYPING_INTERVAL)
        if (last is not None and now - last < TYPING_INTERVAL) or recent >= TYPING_CHATS:
            metrics.hub_typing.labels(outcome="collapsed").inc()
            return False
        if len(self._published) >= _PRUNE_AT:  # only chats it held: bounded, but forget old
            self._published = {
                c: t for c, t in self._published.items() if now - t < TYPING_INTERVAL
            }
        self._published[chat] = now
        return True

    async def claimed(self, chat: str) -> bool:
        """After `due`: whether this publish is its user's in the chat for the interval,
        across all their connections and hub processes (the claim, one round trip)."""
        if await self._claim(self.user_id, chat):
            return True
        metrics.hub_typing.labels(outcome="collapsed").inc()
        return False

    async def read(self, chat: str) -> int | None:
        """The chat's membership version now (None: no such chat), and who blocked this
        user again when the last read of it is BLOCKERS_MAX_AGE old (a block made
        meanwhile hides the typing from then on, within that time). A connection runs
        its invocations one at a time, so two reads never overlap."""
        now = self._loop.time()
        stale = self._read_at is None or now - self._read_at >= BLOCKERS_MAX_AGE
        version, blockers = await self._read(UUID(chat), self.user_id, stale)
        if blockers is not None:
            self._blockers = sorted(str(user) for user in blockers)
            self._read_at = now
        return version

    async def publish(self, chat: str, version: int) -> None:
        """Tell the chat's other members' connections (one group_send): who types, in
        which chat, until when, at which membership version (read()) the typist holds
        it, and who must not be shown it."""
        message = {
            "type": TYPING_TYPE,
            VOLATILE: True,
            "chat": chat,
            "membership_version": version,
            "user": str(self.user_id),
            "blockers": self._blockers,
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
