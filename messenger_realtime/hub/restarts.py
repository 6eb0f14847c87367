"""Noticing a Redis server of the channel layer that restarted.

A redis-server restarted without persistence (or flushed) forgets every hub process's
group memberships and the messages queued for it, without a word: the process's
connections would hear nothing until they reconnected for another reason (the hourly
rejoin at best). So every EPOCH_CHECK the process reads each server's run id (`INFO
server`, one round trip per server per process, not per connection); when one changed,
the fan-out recovers (hub/fanout.py: rejoin the groups, then BACKPLANE_RESTARTED_MESSAGE
to every local connection, a Close with allowReconnect; the clients `Recover`).
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

# How often each Redis server's run id is read: a restart is noticed within this, and the
# events pushed to its forgotten groups meanwhile are recovered by the reconnecting clients.
EPOCH_CHECK = 2.0
BACKPLANE_RESTARTED_EVENT = "realtime.backplane_restarted"
BACKPLANE_RESTARTED_MESSAGE: dict[str, Any] = {"type": BACKPLANE_RESTARTED_EVENT}


class RestartWatch:
    """Each Redis server's run id, read periodically; `restarted(index)` on a change."""

    def __init__(self, layer: Any, restarted: Callable[[int], Awaitable[None]]) -> None:
        self.layer = layer
        self.restarted = restarted
        self.epochs: dict[int, str] = {}  # Redis server index -> its run id, once read

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(EPOCH_CHECK)  # a period, not synchronisation
            for index in range(self.layer.ring_size):
                try:
                    info = await self.layer.connection(index).info("server")
                except Exception:  # unreachable now: read again next period
                    continue
                run_id = str(info.get("run_id", ""))
                previous = self.epochs.get(index)
                self.epochs[index] = run_id
                if previous is not None and previous != run_id:
                    await self.restarted(index)
