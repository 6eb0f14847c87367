"""One user's open connections, counted across every hub process: the cap
MAX_CONNECTIONS_PER_USER.

Without it one user could open connections until a process ran out of file descriptors
(19,982 in ~31 s, when every other user's requests were reset). A connection takes its
place when it is granted (at negotiate, or at a WebSocket upgrade that skips negotiate)
and gives it back when it ends; past the cap the connect is answered 429 (a WebSocket
upgrade is refused), and the user's open connections go on untouched: the newest asks,
the newest is refused.

The count lives beside the rate limits (RATE_LIMIT_REDIS_URL), one sorted set per user:
`messenger_realtime:connections:<user>`, each member a connection id scored with the
Redis-clock time its place lapses. A place lasts LEASE seconds and every hub process
renews its live connections' places every RENEW_EVERY seconds (one pipelined round trip
per renewal), so the places of a process that was killed lapse within LEASE, and a
negotiate whose client never opened the connection holds its place for LEASE at most.
Redis being unreachable never stops a connect (as for the rate limits: logged, let
through).

The same places say who is online (hub/presence/): a user is online while any place of
theirs holds, on any process. So the scripts also tell when a user's first place is
taken (`came_online`) and when their last is given back (`went_offline`, their last-seen
time written), and keep an index of when each user's places lapse
(`messenger_realtime:presence:lapses`), from which a sweep finds the users whose
process died holding their only places (hub/presence/sweep.py). Places are taken at
negotiate: a user is online from the connect on, however many processes serve them.
"""

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol
from uuid import UUID

import redis

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import describe_error
from messenger_realtime.hub import ratelimit
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
KEY = "messenger_realtime:connections:{user}"
# When each user's places lapse (a sorted set of user ids scored in µs of Redis' clock),
# when each went offline (a hash of unix seconds), and which of those PostgreSQL has not
# had yet (a set): hub/presence/.
LAPSES = "messenger_realtime:presence:lapses"
LAST_SEEN = "messenger_realtime:presence:last_seen"
UNSAVED = "messenger_realtime:presence:unsaved"
# A killed process's users are offline within LEASE plus the sweep's period (≤ 30 s).
LEASE = 20.0  # seconds a place lasts without renewal
RENEW_EVERY = 5.0  # seconds between two renewals of a process's live places
RETRY_AFTER = 5  # seconds: a place frees when one of the user's connections ends
# A place taken this recently holds until the next renewal of the process its transport
# opens on (LEASE, less a renewal period, less as much again for the hub processes'
# clocks): such an open needs no round trip; a later one takes its place again.
SURELY_HELD = LEASE - 2 * RENEW_EVERY

# A take is a connect: it is counted against RATE_LIMIT_CONNECTS in the same round trip
# (the Lua function ratelimit.SLIDING_LOG_FUNCTION), one script where a connect used to
# make two.
# KEYS[1]: the user's set, KEYS[2]: LAPSES, KEYS[3]: the user's connect log, KEYS[4]:
# LAST_SEEN; ARGV[1]: the cap (0: none), ARGV[2]: the connection id, ARGV[3]: the lease in
# microseconds, ARGV[4]: the user id, ARGV[5]: the connect limit (0: none), ARGV[6]: its
# window in µs. Counts the connect (past the limit: {0, 0, µs until the next is let
# through}, no place taken), drops lapsed places, then takes (or renews) this
# connection's. Returns {1, came online, 0, last seen} when it has a place (came online:
# it is the user's only one; last seen: when they last went offline, as WatchPresence
# reads it, so the `presence` event and the call say the same), {0, 0, 0} when the user
# holds the cap.
TAKE = (
    ratelimit.SLIDING_LOG_FUNCTION
    + """
local limit = tonumber(ARGV[5])
if limit > 0 then
  local wait = sliding_log(KEYS[3], limit, tonumber(ARGV[6]), 0)
  if wait > 0 then return {0, 0, wait} end
end
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local lease = tonumber(ARGV[3])
local cap = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local held = redis.call('ZCARD', KEYS[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) and cap > 0 and held >= cap then
  return {0, 0, 0}
end
redis.call('ZADD', KEYS[1], t + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000))
redis.call('ZADD', KEYS[2], 'GT', t + lease, ARGV[4])
if held == 0 then return {1, 1, 0, redis.call('HGET', KEYS[4], ARGV[4])} end
return {1, 0, 0}
"""
)

# KEYS[1]: the user's set, KEYS[2]: LAPSES, KEYS[3]: LAST_SEEN, KEYS[4]: UNSAVED; ARGV[1]:
# the connection id, ARGV[2]: the user id. Returns the time (unix seconds) when it was
# the user's last place: the user went offline then (their last-seen time); else 0.
GIVE_BACK = """
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local now = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(now[1]) * 1000000 + tonumber(now[2]))
if removed == 0 or redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], now[1])
redis.call('SADD', KEYS[4], ARGV[2])
return tonumber(now[1])
"""

# KEYS[1]: LAPSES, then the users' sets; ARGV[1]: the lease in µs, ARGV[2]: comma-separated
# counts of connection ids per user, ARGV[3]: the users (comma-separated), then the ids.
# Renews existing places only (XX): a place given back is not taken again.
RENEW = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local lease = tonumber(ARGV[1])
local users = {}
for user in string.gmatch(ARGV[3], '[^,]+') do users[#users + 1] = user end
local at = 4
local i = 1
for count in string.gmatch(ARGV[2], '[^,]+') do
  local renewed = 0
  for _ = 1, tonumber(count) do
    renewed = renewed + redis.call('ZADD', KEYS[i + 1], 'XX', 'CH', t + lease, ARGV[at])
    at = at + 1
  end
  redis.call('PEXPIRE', KEYS[i + 1], math.ceil(lease / 1000))
  if renewed > 0 then redis.call('ZADD', KEYS[1], 'GT', t + lease, users[i]) end
  i = i + 1
end
return 0
"""


class Taken(NamedTuple):
    """A take's answer: whether the connection has a place, whether it is the user's
    only one (the user came online), and when it was refused for the connect rate limit
    (not granted, not counted as a place), the refusal."""

    granted: bool
    came_online: bool
    limited: ratelimit.Refusal | None = None
    last_seen: float | None = None  # came online: when they last went offline, if known


class Place(Protocol):
    """A live connection, as its place's renewal reads it (hub/connection/lifecycle.py)."""

    connection_id: str
    user_id: UUID
    options: HubOptions


def placed_lately(connection_id: str, now: float) -> bool:
    """Whether the negotiate that granted this connection id (a UUIDv7's hex: its first
    12 digits are its unix milliseconds) took its place less than SURELY_HELD seconds
    before `now` (unix seconds), so the place still holds."""
    try:
        made = int(connection_id[:12], 16) / 1000
    except ValueError:
        return False
    return 0 <= now - made < SURELY_HELD


def refusal(options: HubOptions) -> str:
    return f"at most {options.max_connections_per_user} open connections per user"


async def take(
    user_id: UUID, connection_id: str, options: HubOptions, *, connect: bool = True
) -> Taken:
    """Count the connect (RATE_LIMIT_CONNECTS; not when `connect` is False: a negotiated
    connection's transport opening, counted at its negotiate) and give the connection a
    place, in one round trip: not granted when the user is past the rate limit
    (`limited` says until when) or holds the cap already (a place it holds is renewed).
    Without the cap (0) places are still taken: they say who is online."""
    url = options.rate_limit_redis_url
    if not url:
        return Taken(True, False)
    lease_us = round(LEASE * 1_000_000)
    cap = max(0, options.max_connections_per_user)
    log, limit, window_us = ratelimit.connect_log(user_id, options)
    if not connect:
        limit = 0
    try:
        script = ratelimit.registered_script(url, TAKE)
        keys = [KEY.format(user=user_id), LAPSES, log, LAST_SEEN]
        args = [cap, connection_id, lease_us, str(user_id), limit, window_us]
        granted, came_online, wait_us, *seen = await script(keys, args)
    except (redis.RedisError, OSError) as exc:
        _failed("take, and the connect's rate limit", user_id, exc)
        return Taken(True, False)
    if wait_us:
        return Taken(False, False, ratelimit.verdict(ratelimit.CONNECTS, int(wait_us), options))
    last_seen = float(seen[0]) if seen and seen[0] else None
    return Taken(bool(granted), bool(came_online), last_seen=last_seen)


async def give_back(user_id: UUID, connection_id: str, options: HubOptions) -> float | None:
    """The connection ended: its place frees at once. When it was the user's last place,
    the time the user went offline (unix seconds); else None."""
    url = options.rate_limit_redis_url
    if not url:
        return None
    try:
        script = ratelimit.registered_script(url, GIVE_BACK)
        keys = [KEY.format(user=user_id), LAPSES, LAST_SEEN, UNSAVED]
        offline_at = await script(keys, [connection_id, str(user_id)])
    except (redis.RedisError, OSError) as exc:
        _failed("give back", user_id, exc)
        return None
    return float(offline_at) if offline_at else None


async def renew_forever(connections: Callable[[], Sequence[Place]]) -> None:
    """Every RENEW_EVERY seconds, one round trip renews the places of `connections()`,
    this process's live connections (run by its HubProcess, hub/process.py, from the
    first place it takes)."""
    while True:
        await asyncio.sleep(RENEW_EVERY)
        live = connections()
        if not live:
            continue
        options = live[0].options
        if not options.rate_limit_redis_url:
            continue
        by_user: dict[UUID, list[str]] = {}
        for connection in live:
            by_user.setdefault(connection.user_id, []).append(connection.connection_id)
        keys = [LAPSES, *(KEY.format(user=user) for user in by_user)]
        counts = ",".join(str(len(ids)) for ids in by_user.values())
        users = ",".join(str(user) for user in by_user)
        ids = [i for group in by_user.values() for i in group]
        try:
            script = ratelimit.registered_script(options.rate_limit_redis_url, RENEW)
            await script(keys, [math.ceil(LEASE * 1_000_000), counts, users, *ids])
        except (redis.RedisError, OSError) as exc:
            _failed("renew", None, exc)
        except Exception:  # never let the renewal die: places would lapse under users
            logger.exception("connection places not renewed", extra={"action": "renew"})


def _failed(what: str, user_id: Any, exc: Exception) -> None:
    logger.warning(
        f"connection place not counted ({what}; Redis unreachable): let through",
        extra={
            "action": "user_connections",
            Field.USER_ID: user_id,
            Field.ERROR_CODE: describe_error(exc),
        },
    )
