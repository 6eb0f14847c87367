"""One logical hub connection per negotiated connection token, across hub processes.

A token from negotiate is signed and stateless, so any process accepts it; the first
transport request that opens a connection with it reserves it here (Redis SET NX with the
token's lifetime, next to the channel layer's own keys), and every later request that
would open another connection with the same token is refused. That makes a stateful
reconnect's resume, or a long poll, that lands on a process which does not hold the
connection fail cleanly instead of starting a second connection under the same id.
A connection that opens makes its reservation in the round trip that joins its user's
group (hub/connection/groups.py): one Redis round trip less per connect.

Named a reservation, not a claim: the worker's claim is of outbox rows (dispatch/).
"""

import math
import time
from dataclasses import dataclass
from typing import Any

from channels_redis.core import RedisChannelLayer

USED = "connection token already used (its connection ended, or lives in another process)"
_local: dict[str, float] = {}  # the in-memory layer's reservations (one process): id -> expiry


@dataclass(frozen=True, slots=True)
class ConnectionReservation:
    """One connection id reserved for `ttl` seconds. A connection that opens makes it
    in the same round trip as its user group's join (Fanout.join_many, the layer's
    group_add_many: SET NX beside the ZADD), or on its own with make()."""

    connection_id: str
    ttl: float

    def key(self, layer: Any) -> str:
        return f"{layer.prefix}:hub-connection:{self.connection_id}"

    @property
    def seconds(self) -> int:
        return max(1, math.ceil(self.ttl))

    async def make(self, layer: Any) -> bool:
        """True for the first reservation of the id within its ttl, False after."""
        if isinstance(layer, RedisChannelLayer):
            key = self.key(layer)
            redis = layer.connection(layer.consistent_hash(key))
            return bool(await redis.set(key, b"1", nx=True, ex=self.seconds))
        now = time.monotonic()
        for stale in [k for k, expiry in _local.items() if expiry <= now]:
            del _local[stale]
        if self.connection_id in _local:
            return False
        _local[self.connection_id] = now + self.ttl
        return True
