"""The worker's lifecycle: lead (or stand by), pass after pass, idle waits, and a
retention batch between passes (retention.py).

One pass over the due rows, batch by batch, is batches.py; claiming is claimer.py; the SQL
is store.py. Entry points (the management command, Daphne's single-process mode, tests,
benchmarks) build a Dispatcher and call run() or run_pass(); nothing here knows about argv
or signals.
"""

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured

from messenger_realtime.backplane.publisher import Publisher
from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.contracts.port import DomainPort, get_domain_port
from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.backoff import delay_table
from messenger_realtime.dispatch.batches import PassContext, run_pass
from messenger_realtime.dispatch.build_thread import Builder
from messenger_realtime.dispatch.claimer import Claimer
from messenger_realtime.dispatch.gate import PartitionGate
from messenger_realtime.dispatch.lease import Leader
from messenger_realtime.dispatch.outcomes import PassResult
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.dispatch.push import LAYER
from messenger_realtime.dispatch.retention import Retention
from messenger_realtime.dispatch.wakes import Listener, WakePolicy
from messenger_realtime.exceptions import (
    DatabaseUnusable,
    LeadershipLost,
    database_cause,
    describe_error,
    unrecoverable,
)
from messenger_realtime.ops import metrics, tracing
from messenger_realtime.ops.health import Liveness
from messenger_realtime.ops.logging import Field, get_logger
from messenger_realtime.outbox.checks import expiry_problem
from messenger_realtime.outbox.enums import RealtimeDispatchKind
from messenger_realtime.uuid7 import uuid7

logger = get_logger(__name__)

RECONNECT_DELAY = 1.0  # seconds between attempts to get a lost database session back
STATS_INTERVAL = 1.0  # seconds between backlog gauge refreshes

# What the worker had when a database error ended it, and so what its log line says: a
# worker that never connected must not say it lost a lease it never held.
CONNECTING, STANDING_BY, CONNECTED, LEADING = "connecting", "standing by", "connected", "leading"
WHAT_FAILED = {
    CONNECTING: f"dispatcher could not connect to the database; retrying in {RECONNECT_DELAY:g} s",
    STANDING_BY: "dispatcher lost its database session (not leading); reconnecting",
    CONNECTED: "dispatcher lost its database session; reconnecting",
    LEADING: "dispatcher lost its database session while leading, and with it the lease; "
    "reconnecting",
}
LEASE_LOST = "dispatcher lost its lease; reconnecting"  # LeadershipLost while leading


def stale_after(options: RealtimeDispatchOptions) -> float:
    """How long without a heartbeat before the worker counts as stuck."""
    o = options
    slowest = o.max_run_duration + o.publish_timeout + o.build_timeout + o.hub_backlog_wait
    return max(10.0, 3 * o.polling_interval + slowest)


class Dispatcher:
    """One worker's dispatcher; setting `stop` ends it gracefully between rows.

    Args:
        options: the worker's settings (conf.settings.load_options()).
        publisher: where events go (backplane.publisher.ChannelLayerPublisher).
        alias: the Django database alias whose connection settings the worker uses.
        use_lock: take the single-runner lock and lease (False: benchmarks, drills).
        port: the host's domain port (default: the configured DOMAIN_PORT).
        partition: lead this partition only (DISPATCH_PARTITIONS > 1, runner.py),
            with `gate` (the process's PartitionGate) and `stop` shared by its partitions.
    """

    def __init__(
        self,
        options: RealtimeDispatchOptions,
        publisher: Publisher,
        *,
        alias: str = "default",
        use_lock: bool = True,
        port: DomainPort | None = None,
        partition: Partition | None = None,
        gate: PartitionGate | None = None,
        stop: asyncio.Event | None = None,
        on_lock_busy: Callable[[], None] | None = None,
    ) -> None:
        self.options = options
        self.on_lock_busy = on_lock_busy  # another process leads (in_process.py cares)
        self.publisher = publisher
        self.alias = alias
        self.use_lock = use_lock
        self.stop = stop or asyncio.Event()
        self.partition, self.gate, p = partition, gate, partition
        self.log_fields = {"partition": p.index} if p else {}
        # pg_stat_activity (and an audit trigger) tell the partitions' sessions apart.
        self.session = {"application_name": f"{db.APPLICATION}:p{p.index}"} if p else {}
        lock_key = p.lock_key(options.lock_key) if p else options.lock_key
        guard = options.lock_key if p else ""  # never led beside a single runner
        self.leader = Leader(lock_key, options.lock_ttl, alias, guard_key=guard)
        self.listener = Listener(alias)  # LISTEN, only while leading (wakes.py)
        self.port = port or get_domain_port()
        # Not ready while pushes fail (push.LAYER), for as long as a failed row's retry
        # may take to come round again.
        horizon = options.backoff_cap + stale_after(options)
        self.liveness = Liveness(
            stale_after(options),
            stopping=self.stop.is_set,
            layer_trouble=lambda: LAYER.trouble(horizon),
        )
        # The worker's command runs E015 first; an in-process dispatcher starts without
        # system checks, and must not expire a message either.
        if problem := expiry_problem(options.delivery_deadlines):
            raise ImproperlyConfigured(f"MESSENGER_REALTIME DELIVERY_DEADLINES: {problem}")
        self.builder = Builder(self.port, options.build_timeout, options.delivery_deadlines)
        shape = store.ClaimShape(
            options.batch_size, delay_table(options), options.backoff_jitter, options.max_attempts
        )
        self.claimer = Claimer(  # the claim session, ahead of pushes (claimer.py)
            shape,
            alias,
            session=self.session,
            partition=partition,
            leader=self.leader if use_lock else None,
        )
        o = options  # wakes.py: coalesced wake-ups, the suspect probe's pace
        self.wakes = WakePolicy(o.wake_coalesce, o.polling_interval)
        self.conn: psycopg.AsyncConnection[Any] | None = None  # outcomes, stats, retention
        self.retention = Retention(options)
        metrics.create_kind_series(RealtimeDispatchKind.values)

    # -- lifecycle -----------------------------------------------------------------

    async def run(self, *, once: bool = False) -> None:
        """Lead and dispatch until stopped (or one pass with once=True).

        Losing the database connection or the lease means losing leadership: reconnect,
        re-lock, re-LISTEN, then a catch-up pass. A busy lock means another runner leads:
        skip (once) or stand by, retry every POLLING_INTERVAL and take over once the
        leader's heartbeat is older than LOCK_TTL (lease.py). Raises only with once=True
        (psycopg.OperationalError or LeadershipLost), or DatabaseUnusable when the
        database refuses the credentials or does not exist (retrying cannot fix that);
        otherwise it retries until stopped, each log line naming the reason.
        """
        try:
            standing_by = False
            while not self.stop.is_set():
                self.liveness.beat()
                state = CONNECTING  # what a failure ends: the log line says it as it is
                try:
                    await self._connect()
                    self.liveness.connected, self.liveness.cause = True, None
                    state = STANDING_BY
                    if self.use_lock and not await self._acquire():
                        if self.on_lock_busy is not None:
                            self.on_lock_busy()
                        level = logging.DEBUG if standing_by else logging.INFO
                        fields = {"action": "skip", **self.log_fields}
                        logger.log(level, "dispatch lock busy; skipping run", extra=fields)
                        standing_by = True
                        if once:
                            return
                        await self._sleep(self.options.polling_interval)
                        continue
                    fields = {"action": "lead", "lock": self.use_lock, **self.log_fields}
                    logger.info("dispatching", extra=fields)
                    state = LEADING if self.use_lock else CONNECTED
                    await self._lead(once)
                    return
                except (psycopg.OperationalError, LeadershipLost) as exc:
                    self.liveness.cause = database_cause(exc)  # /health/ready says it
                    if unrecoverable(exc):  # wrong credentials or database: say so, stop
                        raise DatabaseUnusable(database_cause(exc)) from exc
                    lease_lost = state == LEADING and isinstance(exc, LeadershipLost)
                    logger.warning(
                        LEASE_LOST if lease_lost else WHAT_FAILED[state],
                        extra={
                            "action": "reconnect",
                            Field.ERROR_CODE: describe_error(exc),
                            "reason": database_cause(exc),
                            **self.log_fields,
                        },
                    )
                    # Abandoned, not closed politely: a session that went silent would
                    # make every goodbye wait out NETWORK_TIMEOUT again (lease.py ends
                    # its own abandoned lease session from the next one).
                    await self.close(abandon=True)
                    if once:
                        raise
                    await self._sleep(RECONNECT_DELAY)
        finally:
            await self.close()

    async def _lead(self, once: bool) -> None:
        await self.listener.listen()  # before the catch-up pass: no NOTIFY falls between
        keeper = asyncio.create_task(self.leader.keep()) if self.use_lock else None
        try:
            await self._passes(once)
        finally:
            if keeper is not None:
                keeper.cancel()
                await asyncio.gather(keeper, return_exceptions=True)
            self._leading(False)

    async def _passes(self, once: bool) -> None:
        last_stats = self.wakes.last_probe = float("-inf")  # catch-up probes
        self._leading(True)
        while not self.stop.is_set():
            result = await self.run_pass()  # after (re)connecting this is the catch-up pass
            self.wakes.pass_ended(rows=result.claimed, suspects_left=result.suspects_left)
            self.liveness.beat()
            metrics.last_pass.set(time.time())
            first = self.partition is None or self.partition.index == 0  # gauges are global
            if first and time.monotonic() - last_stats >= STATS_INTERVAL:  # bounded cost
                await store.refresh_backlog_gauges(await self._work_connection())
                last_stats = time.monotonic()
            # One partition's leader deletes: concurrent deletes would only block each other.
            if once and first:
                await self.run_retention()
            elif first and self.retention.due():
                # One bounded batch between passes (retention.py): the next pass, and the
                # liveness beat with it, run before the next batch.
                await self.retention.step(await self._work_connection())
            if once:
                return
            if result.more_due or result.suspects_left or self.retention.left:
                continue  # the rest is due now: no idle wait
            logger.debug("idle; waiting for NOTIFY or the next poll", extra={"action": "idle"})
            ends = (self.stop, self.leader.lost)  # a lost lease ends the wait too
            wake = await self.listener.wait(self.options.polling_interval, ends, self.wakes)
            logger.debug("woke", extra={"action": "wake", **wake.log_fields()})

    # -- one pass ------------------------------------------------------------------

    async def run_pass(self) -> PassResult:
        """Claim and dispatch batches while they come back full, up to MAX_RUN_DURATION.

        Returns the pass's counts. Raises psycopg.OperationalError when the database
        session fails, and LeadershipLost when the lock is gone before a claim.
        """
        conn = await self._work_connection()
        await self.claimer.connection()  # a session that cannot open fails the pass here
        result = PassResult()
        started = time.monotonic()
        job_run_id = uuid7().hex
        ctx = PassContext(
            self.options,
            self.publisher,
            self.builder,
            self.stop,
            self.claimer,
            self.liveness.beat,
            self,
        )
        ctx = dataclasses.replace(ctx, suspects_due=self.wakes.suspects_due)
        if self.use_lock:  # every push first checks that the lease is still ours
            ctx = dataclasses.replace(ctx, guard=self.leader.ensure_fresh)
        with tracing.pass_span(job_run_id):
            await run_pass(ctx, conn, result)
        result.duration_ms = round((time.monotonic() - started) * 1000, 1)
        level = logging.INFO if result.batches else logging.DEBUG
        fields = {"action": "pass", **result.log_fields(), Field.JOB_RUN_ID: job_run_id}
        logger.log(level, "job completed", extra=fields)
        return result

    async def run_retention(self) -> int:
        """Delete every expired Done row now, batch after batch; the rows deleted."""
        return await self.retention.drain(await self._work_connection(), self.stop)

    # -- connections ---------------------------------------------------------------

    async def _connect(self) -> None:
        if self.use_lock and self.leader.conn is None:
            await self.leader.connect()  # the lease connection; LISTEN opens when leading
        await self._work_connection()

    async def _work_connection(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = await db.connect(self.alias, **self.session)
        return self.conn

    async def close(self, abandon: bool = False) -> None:
        """Release the lock and close every session (run() does this on exit); abandon:
        after a failed session, close the lease's without releasing (Leader.close)."""
        self._leading(False)
        self.liveness.connected = False
        # The domain reads' Django connection lives in the builder's thread: close it there.
        await self.builder.close()
        await self.listener.close()
        await self.leader.close(abandon=abandon)
        await self.claimer.close()
        if self.conn is not None and not self.conn.closed:
            await self.conn.close()
        self.conn = None

    async def _acquire(self) -> bool:
        if self.gate is None or self.partition is None:
            return await self.leader.try_acquire()
        return await self.gate.acquire(self.partition.index, self.leader)

    def _leading(self, leading: bool) -> None:
        """Report leading (or not); a standby (a process leading no partition) clears gauges."""
        was_leading, self.liveness.leading = self.liveness.leading, leading
        if self.gate is not None and self.partition is not None:
            self.gate.report(self.partition.index, leading)
        if was_leading and not leading and (self.gate is None or not self.gate.led):
            metrics.clear_leader_gauges()

    async def _sleep(self, seconds: float) -> None:
        """Wait for `seconds` or until stopped, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
