"""The worker's runner: the spec's single Dispatcher, or K partition Dispatchers.

DISPATCH_PARTITIONS=K > 1 (opt-in) runs one Dispatcher per partition in this process,
each with its own lease (LOCK_KEY#partition-i-of-K), connections and idle wait, all
sharing one stop event and one PartitionGate (gate.py: the spreading rule). Each
partition's Dispatcher leads its partition or stands by for it, exactly as the single
runner does for the whole outbox, so a partition whose leader dies is taken over by a
standby like the single runner's lease is. Entry points build the runner here.
"""

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from messenger_realtime.backplane.publisher import Publisher
from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.dispatch.gate import PartitionGate
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.ops.health import Liveness, LivenessGroup


class Runner(Protocol):
    """What entry points need: run(), a stop event, signs of life for the probes."""

    stop: asyncio.Event
    liveness: Liveness

    async def run(self, *, once: bool = False) -> None: ...


class PartitionedRunner:
    """K partition Dispatchers in one process (DISPATCH_PARTITIONS = K > 1)."""

    def __init__(
        self,
        options: RealtimeDispatchOptions,
        publisher: Publisher,
        *,
        alias: str = "default",
        port: DomainPort | None = None,
        on_lock_busy: Callable[[], None] | None = None,
    ) -> None:
        self.stop = asyncio.Event()
        count = options.dispatch_partitions
        self.gate = PartitionGate(options.polling_interval, count)
        self.dispatchers = [
            Dispatcher(
                options,
                publisher,
                alias=alias,
                port=port,
                partition=Partition(index, count),
                gate=self.gate,
                stop=self.stop,
                on_lock_busy=on_lock_busy,
            )
            for index in range(count)
        ]
        self.liveness: Liveness = LivenessGroup(
            [d.liveness for d in self.dispatchers], led=lambda: sorted(self.gate.led)
        )

    async def run(self, *, once: bool = False) -> None:
        """Every partition's Dispatcher until stopped; with once=True one pass each
        (the partitions another worker leads are skipped)."""
        results = await asyncio.gather(
            *(d.run(once=once) for d in self.dispatchers), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result


def build_runner(
    options: RealtimeDispatchOptions, publisher: Publisher, *, use_lock: bool = True, **kw: Any
) -> Runner:
    """The spec's single runner (K=1, or without the lock), else a PartitionedRunner."""
    if options.dispatch_partitions > 1 and use_lock:
        return PartitionedRunner(options, publisher, **kw)
    return Dispatcher(options, publisher, use_lock=use_lock, **kw)
