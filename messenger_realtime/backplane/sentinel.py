"""A Redis reached through Redis Sentinel, named by a URL like any other Redis.

Every Redis the app uses (the channel layer's CHANNEL_REDIS_URLS / REDIS_URL, and
RATE_LIMIT_REDIS_URL for rate limits, connection places, typing and presence) is a URL,
and a failover must not need another kind of setting. So a Sentinel-managed master is
one more URL scheme:

    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB][?sentinel_password=...]

HOST:PORT are the Sentinels (port 26379 unless given), SERVICE the master's name in their
configuration (`sentinel monitor SERVICE ...`), DB the database number (0). The user
and password are the master's; `sentinel_password` (and `sentinel_username`) the
Sentinels' own, when they require one.

A client of such a URL asks a Sentinel for the master's address at every new connection
(redis-py's SentinelConnectionPool). When the master fails, its connections fail (or
answer READONLY, once it is demoted; redis-py drops those): the next connection finds
the promoted replica. What the app does on top is what it does for a restarted server:
the hub's run-id probe sees a different server, joins its groups again and tells every
connection to reconnect and `Recover` (hub/restarts.py); the worker retries the push.
The Sentinels' own connections carry the same timeouts as the master's, so asking a
silent Sentinel is bounded too.
"""

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379
# Connection settings that concern the Sentinels' connections as well as the master's.
_SHARED = (
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
)


@dataclass(frozen=True)
class SentinelURL:
    """A parsed redis+sentinel:// URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() == SCHEME


def parse(url: str) -> SentinelURL:
    """`url` parsed; ValueError saying what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme.lower() != SCHEME:
        raise ValueError(f"is not a {SCHEME}:// URL")
    credentials, _, hosts = parts.netloc.rpartition("@")
    username, _, password = credentials.partition(":")
    sentinels = []
    for entry in hosts.split(","):
        host, port = _host_port(entry)
        sentinels.append((host, port))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError("names no service (redis+sentinel://HOST:PORT,.../SERVICE[/DB])")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError("has a path other than /SERVICE or /SERVICE/DB (DB a number)")
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    unknown = sorted(set(query) - {"sentinel_password", "sentinel_username"})
    if unknown:
        raise ValueError(f"has unknown options {unknown} (sentinel_password, sentinel_username)")
    return SentinelURL(
        sentinels=tuple(sentinels),
        service=unquote(path[0]),
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) or None,
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
    )


def _host_port(entry: str) -> tuple[str, int]:
    if not entry:
        raise ValueError("names an empty Sentinel (HOST[:PORT],HOST[:PORT],...)")
    if entry.startswith("["):  # [IPv6]:port
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
    if not host:
        raise ValueError(f"names a Sentinel without a host ({entry!r})")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"names a Sentinel with an invalid port ({entry!r})")
    return host, int(port) if port else DEFAULT_PORT


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
