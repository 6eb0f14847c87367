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
"""

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from uuid import UUID

import redis

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import describe_error
from messenger_realtime.hub import ratelimit
from messenger_realtime.ops.logging import Field

logger = logging.getLogger(__name__)
KEY = "messenger_realtime:connections:{user}"
LEASE = 90.0  # seconds a place lasts without renewal
RENEW_EVERY = 30.0  # seconds between two renewals of a process's live places
RETRY_AFTER = 5  # seconds: a place frees when one of the user's connections ends

# KEYS[1]: the user's set; ARGV[1]: the cap, ARGV[2]: the connection id, ARGV[3]: the
# lease in microseconds. Drops lapsed places, then takes (or renews) this connection's;
# returns 1 when it has a place, 0 when the user already holds the cap.
TAKE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if not redis.call('ZSCORE', KEYS[1], ARGV[2])
   and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], t + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000))
return 1
"""

# KEYS: users' sets; ARGV[1]: the lease in µs, then for each key its connection ids,
# ARGV[2] giving how many ids each key has (comma-separated counts). Renews existing
# places only (XX): a place given back is not taken again.
RENEW = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local lease = tonumber(ARGV[1])
local at = 3
local i = 1
for count in string.gmatch(ARGV[2], '[^,]+') do
  for _ = 1, tonumber(count) do
    redis.call('ZADD', KEYS[i], 'XX', t + lease, ARGV[at])
    at = at + 1
  end
  redis.call('PEXPIRE', KEYS[i], math.ceil(lease / 1000))
  i = i + 1
end
return 0
"""


class Place(Protocol):
    """A live connection, as its place's renewal reads it (hub/connection/lifecycle.py)."""

    connection_id: str
    user_id: UUID
    options: HubOptions


def refusal(options: HubOptions) -> str:
    return f"at most {options.max_connections_per_user} open connections per user"


async def take(user_id: UUID, connection_id: str, options: HubOptions) -> bool:
    """Whether the connection has a place (False: the user holds the cap already)."""
    cap, url = options.max_connections_per_user, options.rate_limit_redis_url
    if cap <= 0 or not url:
        return True
    lease_us = round(LEASE * 1_000_000)
    try:
        script = ratelimit.registered_script(url, TAKE)
        taken = await script([KEY.format(user=user_id)], [cap, connection_id, lease_us])
    except (redis.RedisError, OSError) as exc:
        _failed("take", user_id, exc)
        return True
    return bool(taken)


async def give_back(user_id: UUID, connection_id: str, options: HubOptions) -> None:
    """The connection ended: its place frees at once."""
    url = options.rate_limit_redis_url
    if options.max_connections_per_user <= 0 or not url:
        return
    try:
        client = ratelimit.registered_script(url, TAKE).registered_client
        await client.zrem(KEY.format(user=user_id), connection_id)
    except (redis.RedisError, OSError) as exc:
        _failed("give back", user_id, exc)


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
        if options.max_connections_per_user <= 0 or not options.rate_limit_redis_url:
            continue
        by_user: dict[UUID, list[str]] = {}
        for connection in live:
            by_user.setdefault(connection.user_id, []).append(connection.connection_id)
        keys = [KEY.format(user=user) for user in by_user]
        counts = ",".join(str(len(ids)) for ids in by_user.values())
        ids = [i for group in by_user.values() for i in group]
        try:
            script = ratelimit.registered_script(options.rate_limit_redis_url, RENEW)
            await script(keys, [math.ceil(LEASE * 1_000_000), counts, *ids])
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
