"""Per-user rate limits on writes (REST) and hub invocations, counted in Redis so a
limit holds across every process.

A fixed window per (scope, user): the counter `messenger_realtime:rate:<scope>:<user>:<n>`
for window n = floor(now / RATE_LIMIT_WINDOW), raised and given its expiry in one round
trip (INCR and EXPIRE in one MULTI). A request over the limit learns how long until its
window ends (Retry-After). Redis being unreachable never stops a request: the limiter
lets it through and logs, since refusing everyone for Redis' sake would be worse than
an unlimited minute. Refusals are counted (messenger_realtime_hub_rate_limited_total).
"""

import asyncio
import logging
import math
import time
import weakref
from dataclasses import dataclass
from functools import cache
from typing import Any
from uuid import UUID

import redis
import redis.asyncio

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field

logger = logging.getLogger(__name__)
WRITES = "rest"  # REST writes: POST, PATCH, DELETE under /api/
INVOCATIONS = "hub"  # hub invocations with a target (not pings, acks or completions)
KEY = "messenger_realtime:rate:{scope}:{user}:{window}"


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
    return options.rate_limit_writes if scope == WRITES else options.rate_limit_invocations


def _key(scope: str, user_id: UUID, options: HubOptions, now: float) -> tuple[str, int]:
    """The window's counter key, and the seconds until the window ends (at least 1)."""
    window = options.rate_limit_window
    index = math.floor(now / window)
    left = max(1, math.ceil((index + 1) * window - now))
    return KEY.format(scope=scope, user=user_id, window=index), left


def _verdict(scope: str, count: int, limit: int, options: HubOptions, left: int) -> Refusal | None:
    if count <= limit:
        return None
    metrics.hub_rate_limited.labels(scope=scope).inc()
    return Refusal(limit, options.rate_limit_window, left)


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
    key, left = _key(scope, user_id, options, time.time())
    try:
        with _client(options.rate_limit_redis_url).pipeline(transaction=True) as pipe:
            count, _ = pipe.incr(key).expire(key, left + 1).execute()
    except redis.RedisError as exc:
        _failed(scope, user_id, exc)
        return None
    return _verdict(scope, int(count), limit, options, left)


async def acheck(scope: str, user_id: UUID, options: HubOptions) -> Refusal | None:
    """As check(), on the hub's event loop."""
    limit = _limit(options, scope)
    if limit <= 0 or not options.rate_limit_redis_url:
        return None
    key, left = _key(scope, user_id, options, time.time())
    try:
        async with _async_client(options.rate_limit_redis_url).pipeline(transaction=True) as pipe:
            count, _ = await pipe.incr(key).expire(key, left + 1).execute()
    except (redis.RedisError, OSError) as exc:
        _failed(scope, user_id, exc)
        return None
    return _verdict(scope, int(count), limit, options, left)


@cache
def _client(url: str) -> Any:
    """One client (and its connection pool) per process and URL."""
    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


# One asyncio client per event loop and URL: a client is bound to the loop it was made on.
_async_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]]" = (
    weakref.WeakKeyDictionary()
)


def _async_client(url: str) -> Any:
    clients = _async_clients.setdefault(asyncio.get_running_loop(), {})
    client = clients.get(url)
    if client is None:
        client = clients[url] = redis.asyncio.Redis.from_url(
            url, socket_timeout=1, socket_connect_timeout=1
        )
    return client


async def close_clients() -> None:
    """Close this event loop's clients (a test's loop before it ends; Daphne never needs
    to: its one loop lives as long as the process)."""
    for client in _async_clients.pop(asyncio.get_running_loop(), {}).values():
        await client.aclose()
