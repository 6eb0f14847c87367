"""One logical hub connection per negotiated connection token, across hub processes.

A token from negotiate is signed and stateless, so any process accepts it; the first
transport request that opens a connection with it claims it here (Redis SET NX with the
token's lifetime, next to the channel layer's own keys), and every later request that
would open another connection with the same token is refused. That makes a stateful
reconnect's resume, or a long poll, that lands on a process which does not hold the
connection fail cleanly instead of starting a second connection under the same id.
"""

import math
import time
from typing import Any

from channels_redis.core import RedisChannelLayer

_local: dict[str, float] = {}  # the in-memory layer's claims (one process): id -> expiry


async def claim_connection(layer: Any, connection_id: str, ttl: float) -> bool:
    """True for the first claim of `connection_id` within `ttl` seconds, False after."""
    if isinstance(layer, RedisChannelLayer):
        key = f"{layer.prefix}:hub-connection:{connection_id}"
        redis = layer.connection(layer.consistent_hash(key))
        return bool(await redis.set(key, b"1", nx=True, ex=max(1, math.ceil(ttl))))
    now = time.monotonic()
    for stale in [k for k, expiry in _local.items() if expiry <= now]:
        del _local[stale]
    if connection_id in _local:
        return False
    _local[connection_id] = now + ttl
    return True
