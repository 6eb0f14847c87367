"""The dispatch loop: lock -> claim (SKIP LOCKED) -> build -> push -> outcome.

Entry points (the management command, tests, benchmarks) build a Dispatcher and call
run() or run_pass(); nothing here knows about argv or signals.
"""

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections

from . import db, metrics, store, tracing
from .backoff import delay_table
from .conf import RealtimeDispatchOptions
from .contracts import build_events
from .enums import RealtimeOutboxStatus
from .leader import Leader, LeadershipLost
from .payloads import InvalidRow, OutgoingEvent
from .port import DomainPort, get_domain_port
from .publisher import Publisher, describe_error
from .push import push
from .reporting import PassResult, report_batch
from .uuid7 import uuid7

logger = logging.getLogger(__name__)

RECONNECT_DELAY = 1.0  # seconds between attempts to get a lost database session back
STATS_INTERVAL = 1.0  # seconds between backlog gauge refreshes


class Dispatcher:
    """One worker's dispatcher; `stop` ends it gracefully between rows."""

    def __init__(
        self,
        options: RealtimeDispatchOptions,
        publisher: Publisher,
        *,
        alias: str = "default",
        use_lock: bool = True,
        rand: Callable[[], float] = random.random,
        port: DomainPort | None = None,
    ) -> None:
        self.options = options
        self.publisher = publisher
        self.alias = alias
        self.use_lock = use_lock
        self.rand = rand
        self.stop = asyncio.Event()
        self.leader = Leader(options.lock_key, options.lock_ttl, alias)
        self.port = port or get_domain_port()
        # For health checks: leading (lock held) and the last sign of a live loop.
        self.leading = False
        self.connected = False  # a working database session (ready to lead or standing by)
        self.heartbeat = time.monotonic()
        self.conn: psycopg.AsyncConnection[Any] | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def run(self, *, once: bool = False) -> None:
        """Lead and dispatch until stopped (or one pass with once=True).

        Losing the database connection means losing leadership: reconnect, re-lock,
        re-LISTEN, then a catch-up pass. A busy lock means another runner leads: skip
        (once) or stand by and retry every POLLING_INTERVAL.
        """
        try:
            standing_by = False
            while not self.stop.is_set():
                self.heartbeat = time.monotonic()
                try:
                    await self._connect()
                    self.connected = True
                    if self.use_lock and not await self.leader.try_acquire():
                        level = logging.DEBUG if standing_by else logging.INFO
                        logger.log(
                            level, "dispatch lock busy; skipping run", extra={"action": "skip"}
                        )
                        standing_by = True
                        if once:
                            return
                        await self._sleep(self.options.polling_interval)
                        continue
                    logger.info("dispatching", extra={"action": "lead", "lock": self.use_lock})
                    await self._lead(once)
                    return
                except (psycopg.OperationalError, LeadershipLost) as exc:
                    logger.warning(
                        "dispatcher lost its database session; reconnecting",
                        extra={"action": "reconnect", "error": describe_error(exc)},
                    )
                    await self._disconnect()
                    if once:
                        raise
                    await self._sleep(RECONNECT_DELAY)
        finally:
            await self._disconnect()

    async def _lead(self, once: bool) -> None:
        last_retention = last_stats = float("-inf")
        self.leading = True
        while not self.stop.is_set():
            await self.run_pass()  # after (re)connecting this is the catch-up pass
            self.heartbeat = time.monotonic()
            metrics.last_pass.set(time.time())
            if self.heartbeat - last_stats >= STATS_INTERVAL:  # bounded cost under load
                count, oldest = await store.pending_stats(await self._work_connection())
                metrics.pending.set(count)
                metrics.oldest_pending_age.set(oldest)
                last_stats = self.heartbeat
            if once or time.monotonic() - last_retention >= self.options.retention_interval:
                await self.run_retention()
                last_retention = time.monotonic()
            if once:
                return
            logger.debug("idle; waiting for NOTIFY or the next poll", extra={"action": "idle"})
            notified = await self.leader.wait_for_wake(self.options.polling_interval, self.stop)
            logger.debug(
                "woke", extra={"action": "wake", "reason": "notify" if notified else "poll"}
            )

    # -- one pass ------------------------------------------------------------------

    async def run_pass(self) -> PassResult:
        """Claim and dispatch batches while they come back full, up to MAX_RUN_DURATION."""
        conn = await self._work_connection()
        result = PassResult()
        started = time.monotonic()
        job_run_id = uuid7().hex
        with tracing.pass_span(job_run_id):
            await self._batches(conn, result, started)
        result.duration_ms = round((time.monotonic() - started) * 1000, 1)
        level = logging.INFO if result.batches else logging.DEBUG
        logger.log(
            level,
            "job completed",
            extra={
                "action": "pass",
                "dispatched": result.dispatched,
                "retried": result.retried,
                "quarantined": result.quarantined,
                "DurationMs": result.duration_ms,
                "jobRunId": job_run_id,
            },
        )
        return result

    async def _batches(
        self, conn: psycopg.AsyncConnection[Any], result: PassResult, started: float
    ) -> None:
        opts = self.options
        while not self.stop.is_set():
            if self.use_lock:
                await self.leader.ensure_held()
            delays = delay_table(opts, self.rand)
            rows = await store.claim(conn, opts.batch_size, delays, opts.max_attempts)
            if not rows:
                return
            result.batches += 1
            logger.info("batch claimed", extra={"action": "claim", "rows": len(rows)})
            await self._dispatch_batch(conn, rows, result)
            self.heartbeat = time.monotonic()
            if len(rows) < opts.batch_size or time.monotonic() - started >= opts.max_run_duration:
                return

    async def _dispatch_batch(
        self, conn: psycopg.AsyncConnection[Any], rows: list[store.ClaimedRow], result: PassResult
    ) -> None:
        exhausted = [r for r in rows if r.status == RealtimeOutboxStatus.QUARANTINED]
        pending = [r for r in rows if r.status != RealtimeOutboxStatus.QUARANTINED]
        built = await self._build(pending)
        invalid = sum(isinstance(event, InvalidRow) for event in built)
        logger.debug(
            "batch built", extra={"action": "build", "rows": len(built), "invalid": invalid}
        )
        pushed = await push(pending, built, self.publisher, self.stop, self.options.publish_timeout)
        done, failed, released = pushed.done, pushed.failed, pushed.released
        outcomes = await store.record_outcomes(
            conn, done, failed, released, self.options.max_attempts
        )
        await report_batch(rows, outcomes, exhausted, len(released), result, Dispatcher)

    async def _build(
        self, rows: list[store.ClaimedRow]
    ) -> list[OutgoingEvent | InvalidRow | BaseException]:
        """Typed events for a batch: one domain read per entity type, off the loop.

        If reading the domain fails (database trouble), every row gets that transient
        error and is retried after its backoff; the pass goes on.
        """
        if not rows:
            return []
        try:
            built: list[OutgoingEvent | InvalidRow | BaseException] = await sync_to_async(
                _build_with_fresh_connection
            )(rows, self.port)
        except Exception as exc:
            logger.warning(
                "payload build failed", extra={"action": "build", "error": describe_error(exc)}
            )
            return [exc] * len(rows)
        return built

    async def run_retention(self) -> int:
        """Delete Done rows older than RETENTION_DONE in bounded batches."""
        conn = await self._work_connection()
        deleted = 0
        while not self.stop.is_set():
            count = await store.delete_done(
                conn, self.options.retention_done, self.options.retention_batch
            )
            deleted += count
            if count < self.options.retention_batch:
                break
        if deleted:
            logger.info("retention", extra={"action": "retention", "deleted": deleted})
        return deleted

    # -- connections ---------------------------------------------------------------

    async def _connect(self) -> None:
        if self.leader.conn is None:
            await self.leader.connect()  # LISTEN always; the lock only when use_lock
        await self._work_connection()

    async def _work_connection(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = await db.connect(self.alias)
        return self.conn

    async def close(self) -> None:
        """Release the lock and close both connections (run() does this on exit)."""
        await self._disconnect()

    async def _disconnect(self) -> None:
        self.leading = self.connected = False
        # The domain reads' Django connection lives in sync_to_async's thread: close it
        # there too, so no session outlives the dispatcher.
        await sync_to_async(connections.close_all)()
        await self.leader.close()
        conn, self.conn = self.conn, None
        if conn is not None and not conn.closed:
            await conn.close()

    async def _sleep(self, seconds: float) -> None:
        """Wait for `seconds` or until stopped, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)


def _build_with_fresh_connection(
    rows: list[store.ClaimedRow], port: DomainPort
) -> list[OutgoingEvent | InvalidRow | BaseException]:
    close_old_connections()  # a long-lived worker must not reuse a broken connection
    return list(build_events(rows, port))
