"""Noticing a Redis server of the channel layer that restarted, or went silent.

A redis-server restarted without persistence (or flushed) forgets every hub process's
group memberships and the messages queued for it, without a word: the process's
connections would hear nothing until they reconnected for another reason (the hourly
rejoin at best). So every EPOCH_CHECK the process reads each server's run id (`INFO
server`, one round trip per server per process, not per connection); when one changed,
the fan-out recovers (hub/fanout.py: rejoin the groups, then BACKPLANE_RESTARTED_MESSAGE
to every local connection, a Close with allowReconnect; the clients `Recover`).

A server whose connections failed or went silent (no reply within NETWORK_TIMEOUT: a
lost flow, a partition, a failover) is treated the same way, since what they carried may
be lost (a silent receive's pop, taken by Redis, never arrives): a probe that fails, or
the reader's failed receive (lost()), drops every connection to that server, and the
first probe that answers again, on a new connection, runs the same recovery. So a silent
server is noticed within NETWORK_TIMEOUT + EPOCH_CHECK.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)

# How often each Redis server's run id is read: a restart is noticed within this, and the
# events pushed to its forgotten groups meanwhile are recovered by the reconnecting clients.
EPOCH_CHECK = 2.0
BACKPLANE_RESTARTED_EVENT = "realtime.backplane_restarted"
BACKPLANE_RESTARTED_MESSAGE: dict[str, Any] = {"type": BACKPLANE_RESTARTED_EVENT}


class RestartWatch:
    """Each Redis server's run id, read periodically; `restarted(index)` on a change, or
    once a server whose connections failed (lost()) answers again."""

    def __init__(self, layer: Any, restarted: Callable[[int], Awaitable[None]]) -> None:
        self.layer = layer
        self.restarted = restarted
        self.epochs: dict[int, str] = {}  # Redis server index -> its run id, once read
        self.suspects: set[int] = set()  # servers whose connections failed since

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(EPOCH_CHECK)  # a period, not synchronisation
            for index in range(self.layer.ring_size):
                await self.probe(index)

    async def probe(self, index: int) -> None:
        """Read the server's run id; recover if it changed or the server was suspect."""
        try:
            run_id = await self.layer.run_id(index)
        except Exception as exc:  # unreachable or silent: read again next period
            await self.lost(index, exc)
            return
        previous = self.epochs.get(index)
        self.epochs[index] = run_id
        suspect = index in self.suspects
        self.suspects.discard(index)
        if suspect or (previous is not None and previous != run_id):
            await self.restarted(index)

    async def lost(self, index: int, exc: BaseException) -> None:
        """The server's connections failed (a probe, a receive): what they carried may be
        lost. Drop them all (a silent one would hold the next command too); the next
        probe that answers runs the recovery."""
        if index not in self.suspects:
            logger.warning(
                "channel layer server unreachable or silent; reconnecting",
                extra={
                    "action": "backplane_lost",
                    "server": index,
                    Field.ERROR_CODE: describe_error(exc),
                },
            )
        self.suspects.add(index)
        await self.layer.drop_connections(index)
