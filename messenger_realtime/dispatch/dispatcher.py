"""The dispatch loop: lock -> claim (SKIP LOCKED) -> build -> push -> outcome.

This module holds the worker's lifecycle (leadership, connections, idle waits, retention);
one pass over the due rows, batch by batch, is messenger_realtime/flow.py.

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
from django.db import connections

from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.contracts.port import DomainPort, get_domain_port
from messenger_realtime.dispatch import batches as flow
from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.leader import Leader, LeadershipLost
from messenger_realtime.dispatch.outcomes import PassResult
from messenger_realtime.ops import metrics, tracing
from messenger_realtime.transport.publisher import Publisher, describe_error
from messenger_realtime.uuid7 import uuid7

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
        self.conn: psycopg.AsyncConnection[Any] | None = None  # outcomes, stats, retention
        self.claim_conn: psycopg.AsyncConnection[Any] | None = None  # claims, ahead of pushes

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
        claim_conn = await self._claim_connection()
        with tracing.pass_span(job_run_id):
            await flow.run_batches(self, claim_conn, conn, result, started)
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

    async def _claim_connection(self) -> psycopg.AsyncConnection[Any]:
        if self.claim_conn is None or self.claim_conn.closed:
            self.claim_conn = await db.connect(self.alias)
        return self.claim_conn

    async def close(self) -> None:
        """Release the lock and close every session (run() does this on exit)."""
        await self._disconnect()

    async def _disconnect(self) -> None:
        self.leading = self.connected = False
        # The domain reads' Django connection lives in sync_to_async's thread: close it
        # there too, so no session outlives the dispatcher.
        await sync_to_async(connections.close_all)()
        await self.leader.close()
        for conn in (self.conn, self.claim_conn):
            if conn is not None and not conn.closed:
                await conn.close()
        self.conn = self.claim_conn = None

    async def _sleep(self, seconds: float) -> None:
        """Wait for `seconds` or until stopped, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
