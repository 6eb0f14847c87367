"""Per-user rate limits on writes (REST) and hub invocations, counted in Redis so a
limit holds across every process.

A sliding log per (scope, user): the sorted set `messenger_realtime:rate:<scope>:<user>`
holds the Redis-clock time of each request let through in the last RATE_LIMIT_WINDOW
seconds, so "at most N per W s" holds over every W-second span, not only inside fixed
windows (a fixed window lets 2N through across its boundary, and a request landing
just past one was let through where it should not be). One script does it in one round
trip, atomically, on Redis' clock (one clock for every process): drop the entries older
than the window, count, add this request if under the limit. A refused request is not
logged, so a client that keeps retrying is let through again as soon as its oldest
request ages out; it learns when that is (Retry-After). The log holds at most N entries
and expires a window after the last request let through.

Redis being unreachable never stops a request: the limiter lets it through and logs,
since refusing everyone for Redis' sake would be worse than an unlimited minute.
Refusals are counted (messenger_realtime_hub_rate_limited_total).
"""

import asyncio
import math
import weakref
from dataclasses import dataclass
from functools import cache
from typing import Any
from uuid import UUID

import redis
import redis.asyncio

from messenger_realtime.backplane import sentinel
from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
WRITES = "rest"  # REST writes: POST, PATCH, DELETE under /api/
INVOCATIONS = "hub"  # hub invocations with a target (not pings, acks or completions)
CONNECTS = "connect"  # negotiates, and WebSocket upgrades that skip negotiate
KEY = "messenger_realtime:rate:{scope}:{user}"
# The sliding log as a Lua function, so another script can count a request in the same
# round trip as its own work (a connect and its place: hub/user_connections.py).
# `key`: the log; `limit` (>= 1); `window` in microseconds; `charge` (0: none), logged
# whatever the count (what a request turned out to cost beyond the one it was counted
# as: a Recover's events, hub/connection/methods/recover.py); `units` (>= 1) what the
# request costs, logged as that many entries only if all fit (a hub method's declared
# cost: hub/connection/methods/). Returns 0 when the request is let through (and
# logged), else the microseconds until enough logged requests leave the window. TIME is
# Redis' clock (scripts may call it since Redis 5, which replicates a script's effects,
# not the script). The member is the time plus the count, unique even for two requests
# in one microsecond.
SLIDING_LOG_FUNCTION = """
local function sliding_log(key, limit, window, charge, units)
  local now = redis.call('TIME')
  local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', t - window)
  local count = redis.call('ZCARD', key)
  if charge > 0 then
    for i = 1, math.min(charge, limit) do
      redis.call('ZADD', key, t, now[1] .. '.' .. now[2] .. ':' .. (count + i))
    end
    redis.call('PEXPIRE', key, math.ceil(window / 1000))
    return 0
  end
  units = math.min(units or 1, limit)
  if count + units <= limit then
    for i = 1, units do
      redis.call('ZADD', key, t, now[1] .. '.' .. now[2] .. ':' .. (count + i))
    end
    redis.call('PEXPIRE', key, math.ceil(window / 1000))
    return 0
  end
  local at = count + units - limit - 1
  local oldest = redis.call('ZRANGE', key, at, at, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + window - t)
end
"""
# KEYS[1]: the log; ARGV[1]: the limit, ARGV[2]: the window in µs, ARGV[3] (optional):
# a charge, ARGV[4] (optional): the units this request costs (1 when absent).
SLIDING_LOG = (
    SLIDING_LOG_FUNCTION + "return sliding_log(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]),"
    " tonumber(ARGV[3] or '0'), tonumber(ARGV[4] or '1'))\n"
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Over the limit: at most `limit` per `window` seconds; try again after `retry_after`."""

    limit: int
    window: float
    retry_after: int

    def __str__(self) -> str:
        return (
            f"rate limit exceeded: at most {self.limit} per {self.window:g} s; "
            f"retry in {self.retry_after} s"
        )


def _limit(options: HubOptions, scope: str) -> int:
    if scope == WRITES:
        return options.rate_limit_writes
    return options.rate_limit_connects if scope == CONNECTS else options.rate_limit_invocations


def _arguments(scope: str, user_id: UUID, options: HubOptions) -> tuple[list[str], list[int]]:
    """The script's keys and arguments: the user's log, the limit, the window in µs."""
    window_us = max(1, round(options.rate_limit_window * 1_000_000))
    return [KEY.format(scope=scope, user=user_id)], [_limit(options, scope), window_us]


def connect_log(user_id: UUID, options: HubOptions) -> tuple[str, int, int]:
    """What a script counting a connect in its own round trip passes sliding_log: the
    user's connect log, the limit (0: connects are not limited) and the window in µs
    (hub/user_connections.py: a connect is counted as its place is taken)."""
    keys, (limit, window_us) = _arguments(CONNECTS, user_id, options)
    return keys[0], max(0, limit), window_us


def verdict(scope: str, wait_us: int, options: HubOptions) -> Refusal | None:
    """sliding_log's answer: None (let through), or the refusal, counted."""
    if wait_us <= 0:
        return None
    metrics.hub_rate_limited.labels(scope=scope).inc()
    retry_after = max(1, math.ceil(wait_us / 1_000_000))
    return Refusal(_limit(options, scope), options.rate_limit_window, retry_after)


def _failed(scope: str, user_id: UUID, exc: Exception) -> None:
    logger.warning(
        "rate limit not counted (Redis unreachable): let through",
        extra={
            "action": "rate_limit",
            "scope": scope,
            Field.USER_ID: user_id,
            Field.ERROR_CODE: describe_error(exc),
        },
    )


def check(scope: str, user_id: UUID, options: HubOptions) -> Refusal | None:
    """Count one request of `user_id` in `scope` (synchronous: the REST views)."""
    limit = _limit(options, scope)
    if limit <= 0 or not options.rate_limit_redis_url:
        return None
    keys, args = _arguments(scope, user_id, options)
    try:
        wait_us = _script(options.rate_limit_redis_url)(keys, args)
    except redis.RedisError as exc:
        _failed(scope, user_id, exc)
        return None
    return verdict(scope, int(wait_us), options)


async def acheck(scope: str, user_id: UUID, options: HubOptions, units: int = 1) -> Refusal | None:
    """As check(), on the hub's event loop, for a request that costs `units` (all of
    them fit in the window, or none is logged)."""
    limit = _limit(options, scope)
    if limit <= 0 or not options.rate_limit_redis_url:
        return None
    keys, args = _arguments(scope, user_id, options)
    if units != 1:
        args = [*args, 0, units]
    try:
        wait_us = await registered_script(options.rate_limit_redis_url)(keys, args)
    except (redis.RedisError, OSError) as exc:
        _failed(scope, user_id, exc)
        return None
    return verdict(scope, int(wait_us), options)


async def acharge(scope: str, user_id: UUID, units: int, options: HubOptions) -> None:
    """Log `units` more requests of `user_id` in `scope` (at most the limit), whatever
    the count: the cost of a request beyond the one acheck() counted it as."""
    if units <= 0 or _limit(options, scope) <= 0 or not options.rate_limit_redis_url:
        return
    keys, args = _arguments(scope, user_id, options)
    try:
        await registered_script(options.rate_limit_redis_url)(keys, [*args, units])
    except (redis.RedisError, OSError) as exc:
        _failed(scope, user_id, exc)


# A registered script is sent by its SHA (EVALSHA) and loaded again by redis-py when
# Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH).
@cache
def _script(url: str) -> Any:
    """One client (and its connection pool) per process and URL, with the script."""
    client = sentinel.client(url, socket_timeout=1, socket_connect_timeout=1)
    return client.register_script(SLIDING_LOG)


# One asyncio client per event loop and URL: a client is bound to the loop it was made on.
Scripts = dict[tuple[str, str], Any]  # (url, source) -> the script on that URL's client
_async_scripts: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Scripts]" = (
    weakref.WeakKeyDictionary()
)


def registered_script(url: str, source: str = SLIDING_LOG) -> Any:
    """`source` registered on this loop's client of `url` (one client per loop and URL:
    the per-user connection count, hub/user_connections.py, shares it)."""
    scripts = _async_scripts.setdefault(asyncio.get_running_loop(), {})
    script = scripts.get((url, source))
    if script is None:
        client = next(
            (s.registered_client for (u, _), s in scripts.items() if u == url), None
        ) or sentinel.async_client(url, socket_timeout=1, socket_connect_timeout=1)
        script = scripts[(url, source)] = client.register_script(source)
    return script


async def close_clients() -> None:
    """Close this event loop's clients (a test's loop before it ends; Daphne never needs
    to: its one loop lives as long as the process)."""
    clients = {
        id(s.registered_client): s.registered_client
        for s in _async_scripts.pop(asyncio.get_running_loop(), {}).values()
    }
    for client in clients.values():
        await client.aclose()
