"""Which partitions one worker process leads (DISPATCH_PARTITIONS > 1), and when a
standby partition of it may take a free lock (the spreading rule below)."""

import asyncio
import time

from messenger_realtime.dispatch.lease import Leader
from messenger_realtime.ops import metrics


class PartitionGate:
    """One worker process's partitions (DISPATCH_PARTITIONS > 1): which it leads, and the
    spreading rule that decides when one of its standby partitions may take a free lock.

    A process leading nothing takes any free partition at once; a process already leading
    n others waits until it has seen the partition free for (n + 0.5) POLLING_INTERVALs, so
    a standby process leading fewer (polling every interval) gets there first. Alone, a
    worker thus leads all K partitions after a few polls; started together, or after a
    leader died, workers spread. A stale lease (a wedged holder) is taken over at once:
    failover never waits for spreading. There is no rebalancing of live leaders: restart
    (SIGTERM) a worker that leads several partitions to spread them (docs/dispatcher.md).
    """

    def __init__(self, polling_interval: float, partitions: int) -> None:
        self.polling_interval = polling_interval
        self.partitions = partitions  # DISPATCH_PARTITIONS (every lease says it)
        self.led: set[int] = set()
        self._free_since: dict[int, float] = {}
        self._turn = asyncio.Lock()  # one acquisition at a time, so `led` is exact

    async def acquire(self, index: int, leader: Leader) -> bool:
        """Try to lead partition `index` by the rule above; True when it leads now."""
        async with self._turn:
            others = len(self.led - {index})
            if others and await leader.lock_is_free():
                first = self._free_since.setdefault(index, time.monotonic())
                if time.monotonic() - first < (others + 0.5) * self.polling_interval:
                    return False
            self._free_since.pop(index, None)
            if not await leader.try_acquire(self.partitions):
                return False
            self.led.add(index)
            return True

    def report(self, index: int, leading: bool) -> None:
        """Partition `index` is led (or not) by this process: the gauge and `led`."""
        metrics.partition_leading.labels(partition=str(index)).set(int(leading))
        if not leading:
            self.led.discard(index)
