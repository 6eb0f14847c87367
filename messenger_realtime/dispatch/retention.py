"""Retention: Done rows older than RETENTION_DONE deleted in bounded batches, never in one
go on the leader's loop.

Each batch is one DELETE of at most RETENTION_BATCH rows (its own statement, so its own
short transaction) through ix_rto_done_updated. The leader takes one batch per turn of
its loop (dispatcher.py): while batches come back full it skips the idle wait, but a
dispatch pass and the liveness beat come before every next batch, so a day of expired
rows never holds new messages or /health/live. `--once` drains them all. Pending and
Quarantined rows are never deleted.
"""

import asyncio
import time
from typing import Any

from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.dispatch import store
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)


class Retention:
    """When retention is due, one batch at a time, and what the current run deleted."""

    def __init__(self, options: RealtimeDispatchOptions) -> None:
        self.options = options
        self.left = False  # the last batch was full: more rows are expired
        self.total = 0  # rows deleted by the current run
        self._caught_up_at = float("-inf")  # monotonic time the last run ended

    def due(self) -> bool:
        """A batch is due: a run is under way, or RETENTION_INTERVAL passed since the last."""
        since = time.monotonic() - self._caught_up_at
        return self.left or since >= self.options.retention_interval

    async def step(self, conn: Any) -> bool:
        """Delete one batch; True when it was full (more are expired). Counts the rows,
        says how far behind retention is, and logs a run's total once caught up."""
        older_than, batch = self.options.retention_done, self.options.retention_batch
        if not self.left:  # a new run
            self.total = 0
        count = await store.delete_done(conn, older_than, batch)
        self.total += count
        metrics.retention_deleted.inc(count)
        self.left = count >= batch
        behind = await store.retention_behind(conn, older_than) if self.left else 0.0
        metrics.retention_behind.set(behind)
        if not self.left:
            self._caught_up_at = time.monotonic()
            if self.total:
                logger.info("retention", extra={"action": "retention", "deleted": self.total})
        return self.left

    async def drain(self, conn: Any, stop: asyncio.Event) -> int:
        """Every expired row, batch after batch (`--once`, tests); the rows deleted."""
        while not stop.is_set() and await self.step(conn):
            pass
        return self.total
