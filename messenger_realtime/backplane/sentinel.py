"""A Redis reached through Redis Sentinel, named by a URL like any other Redis.

Every Redis the app uses (the channel layer's CHANNEL_REDIS_URLS / REDIS_URL, and
RATE_LIMIT_REDIS_URL for rate limits, connection places, typing and presence) is a URL,
and a failover must not need another kind of setting. So a Sentinel-managed master is
one more URL scheme, redis+sentinel:// (its form: conf/sentinel_url.py).

A client of such a URL asks a Sentinel for the master's address at every new connection
(redis-py's SentinelConnectionPool). When the master fails, its connections fail (or
answer READONLY, once it is demoted; redis-py drops those): the next connection finds
the promoted replica. What the app does on top is what it does for a restarted server:
the hub's run-id probe sees a different server, joins its groups again and tells every
connection to reconnect and `Recover` (hub/restarts.py); the worker retries the push.
The Sentinels' own connections carry the same timeouts as the master's, so asking a
silent Sentinel is bounded too.
"""

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from messenger_realtime.conf.sentinel_url import SentinelURL, is_sentinel, parse

# Connection settings that concern the Sentinels' connections as well as the master's.
_SHARED = (
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
)


def _kwargs(parsed: SentinelURL, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the master's connection kwargs, the Sentinels'): the same timeouts for both."""
    master = {"db": parsed.db, **kwargs}
    if parsed.username:
        master["username"] = parsed.username
    if parsed.password:
        master["password"] = parsed.password
    sentinels = {key: kwargs[key] for key in _SHARED if key in kwargs}
    if parsed.sentinel_username:
        sentinels["username"] = parsed.sentinel_username
    if parsed.sentinel_password:
        sentinels["password"] = parsed.sentinel_password
    return master, sentinels


class SentinelConnectionPool(redis.asyncio.sentinel.SentinelConnectionPool):
    """redis-py's pool of a Sentinel-managed master, whose disconnect() closes the
    Sentinels' connections too (redis-py leaves them open: a test's loop would end with
    sockets nobody closes)."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        for client in self.sentinel_manager.sentinels:
            await client.connection_pool.disconnect()


class BlockingSentinelConnectionPool(SentinelConnectionPool, redis.asyncio.BlockingConnectionPool):
    """With BlockingConnectionPool's bound: at most max_connections, a command waiting
    for one at most `timeout` (the channel layer's POOL_SIZE rule, backplane/layer.py),
    rather than failing at once past the maximum."""


def async_pool(url: str, **kwargs: Any) -> redis.asyncio.ConnectionPool:
    """An asyncio connection pool for `url` (plain or Sentinel). `max_connections` and
    `timeout` make it a blocking pool; the rest are connection kwargs."""
    bound = {key: kwargs.pop(key) for key in ("max_connections", "timeout") if key in kwargs}
    if not is_sentinel(url):
        if bound:
            return redis.asyncio.BlockingConnectionPool.from_url(url, **kwargs, **bound)
        return redis.asyncio.ConnectionPool.from_url(url, **kwargs)
    parsed = parse(url)
    master, sentinel_kwargs = _kwargs(parsed, kwargs)
    # redis-py's Sentinel classes are untyped.
    manager = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs
    )
    pools = BlockingSentinelConnectionPool if bound else SentinelConnectionPool
    pool: redis.asyncio.ConnectionPool = pools(  # type: ignore[no-untyped-call]
        parsed.service, manager, **master, **bound
    )
    return pool


def async_client(url: str, **kwargs: Any) -> "redis.asyncio.Redis":
    """An asyncio client of `url` (plain or Sentinel)."""
    if not is_sentinel(url):
        return redis.asyncio.Redis.from_url(url, **kwargs)
    return redis.asyncio.Redis.from_pool(async_pool(url, **kwargs))  # closes it in aclose()


def client(url: str, **kwargs: Any) -> "redis.Redis":
    """A blocking client of `url` (plain or Sentinel)."""
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **kwargs)
    parsed = parse(url)
    master, sentinel_kwargs = _kwargs(parsed, kwargs)
    manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs
    )
    pool = redis.sentinel.SentinelConnectionPool(  # type: ignore[no-untyped-call]
        parsed.service, manager, **master
    )
    return redis.Redis(connection_pool=pool)
