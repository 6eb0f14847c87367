"""The worker's runner: the spec's single Dispatcher, or K partition Dispatchers.

DISPATCH_PARTITIONS=K > 1 (opt-in) runs one Dispatcher per partition in this process,
each with its own lease (LOCK_KEY#partition-i-of-K), connections and idle wait, all
sharing one stop event and one PartitionGate (gate.py: the spreading rule). Each
partition's Dispatcher leads its partition or stands by for it, exactly as the single
runner does for the whole outbox, so a partition whose leader dies is taken over by a
standby like the single runner's lease is. Entry points build the runner here, and
run it with run_until_stopped(): signals stop it, and it says in one line why it stopped.
"""

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from messenger_realtime.backplane.publisher import Publisher
from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.dispatch.gate import PartitionGate
from messenger_realtime.dispatch.lease import advisory_key
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.exceptions import DatabaseUnusable, database_cause, describe_error
from messenger_realtime.ops.health import Liveness, LivenessGroup
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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
        self.alias = alias
        self.index_turn = advisory_key(f"{options.lock_key}#partition-index")
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
        # The partitions' walk index is built beside the leaders, not before them: on a
        # large outbox the build takes a while, and claims are correct without it.
        index = asyncio.create_task(self.ensure_partition_index())
        results = await asyncio.gather(
            *(d.run(once=once) for d in self.dispatchers), return_exceptions=True
        )
        if not index.done():
            index.cancel()
        await asyncio.gather(index, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def ensure_partition_index(self) -> None:
        """ix_rto_pending_partition, which only partitioned runners need (migration 0011
        dropped it where none ran): created if missing, on a connection of its own. A
        failure is logged, never fatal: the walk then reads ix_rto_pending_target."""
        try:
            conn = await db.connect(self.alias)
            try:
                done = await store.ensure_partition_index(conn, self.index_turn)
            finally:
                await conn.close()
        except (psycopg.Error, OSError) as exc:
            logger.warning(
                "partition index not ensured: %s",
                describe_error(exc),
                extra={"action": "partition_index", "outcome": "failed"},
            )
            return
        if done != "valid":
            logger.info(
                "partition index %s",
                done,
                extra={"action": "partition_index", "outcome": done},
            )


def build_runner(
    options: RealtimeDispatchOptions, publisher: Publisher, *, use_lock: bool = True, **kw: Any
) -> Runner:
    """The spec's single runner (K=1, or without the lock), else a PartitionedRunner."""
    if options.dispatch_partitions > 1 and use_lock:
        return PartitionedRunner(options, publisher, **kw)
    return Dispatcher(options, publisher, use_lock=use_lock, **kw)


async def run_until_stopped(runner: Runner, *, once: bool = False) -> None:
    """Run until SIGTERM/SIGINT (or one pass with once=True), then log one line saying
    why it stopped: the signal, --once done, or the error that ended it (re-raised)."""
    loop = asyncio.get_running_loop()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        # Stop between rows: finish the row in hand, record outcomes, release the lock.
        received.append(sig.name)
        runner.stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await runner.run(once=once)
    except DatabaseUnusable as exc:
        _stopped(logging.ERROR, f"cannot use the database (DATABASE_URL): {exc}", exc)
        raise
    except psycopg.OperationalError as exc:  # --once only: run() retries otherwise
        _stopped(logging.ERROR, f"database error: {database_cause(exc)}", exc)
        raise
    except Exception as exc:
        _stopped(logging.ERROR, f"fatal error: {describe_error(exc)}", exc)
        raise
    else:
        if received:
            why = f"{received[0]} received; rows in hand recorded, lock released"
        else:
            why = "--once pass finished" if once else "stop requested"
        _stopped(logging.INFO, why)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def _stopped(level: int, why: str, exc: BaseException | None = None) -> None:
    fields: dict[str, Any] = {"action": "stop", "reason": why}
    if exc is not None:
        fields[Field.ERROR_CODE] = describe_error(exc)
    logger.log(level, "worker stopped: %s", why, extra=fields)
