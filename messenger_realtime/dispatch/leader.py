"""Single-runner leadership and wake-ups on one dedicated autocommit connection.

The session advisory lock and LISTEN share this connection: if it dies, the lock dies
with it, so the holder re-checks the lock before every batch and the run loop reconnects,
re-locks, re-LISTENs and then does a catch-up pass. Polling is the safety net; NOTIFY only
cuts latency.
"""

import asyncio
import hashlib
import logging
from typing import Any

import psycopg

from messenger_realtime.dispatch import connections as db
from messenger_realtime.exceptions import LeadershipLost
from messenger_realtime.outbox.notify import NOTIFY_CHANNEL

logger = logging.getLogger(__name__)


def advisory_key(lock_key: str) -> int:
    """A stable signed 64-bit advisory lock id for LOCK_KEY (same in every process)."""
    return int.from_bytes(hashlib.sha256(lock_key.encode()).digest()[:8], "big", signed=True)


class Leader:
    """The worker's lock-and-listen connection."""

    def __init__(self, lock_key: str, lock_ttl: float, alias: str = "default") -> None:
        self.key = advisory_key(lock_key)
        self.lock_ttl = lock_ttl
        self.alias = alias
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.holds_lock = False

    async def connect(self) -> None:
        self.conn = await db.connect(self.alias)
        # The server drops a vanished worker's session (and so its lock) within ~2/3 of
        # LOCK_TTL, letting a standby take over; loopback connections die at once anyway.
        idle = max(1, int(self.lock_ttl / 3))
        interval = max(1, int(self.lock_ttl / 9))
        await self.conn.execute(
            f"SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = {interval};"
            " SET tcp_keepalives_count = 3"
        )
        await self.conn.execute(f"LISTEN {NOTIFY_CHANNEL}")

    async def try_acquire(self) -> bool:
        """Take the single-runner lock if free; never waits."""
        conn = self._connection()
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,))
        row = await cur.fetchone()
        self.holds_lock = bool(row and row[0])
        return self.holds_lock

    async def ensure_held(self) -> None:
        """Raise LeadershipLost unless this session still holds the lock (checked per batch)."""
        conn = self._connection()
        # An advisory lock on a bigint key shows in pg_locks as classid = high 32 bits,
        # objid = low 32 bits, objsubid = 1.
        cur = await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
            " AND pid = pg_backend_pid() AND granted AND objsubid = 1"
            " AND classid::bigint = (%(key)s >> 32) & 4294967295"
            " AND objid::bigint = %(key)s & 4294967295)",
            {"key": self.key},
        )
        row = await cur.fetchone()
        if not (row and row[0]):
            self.holds_lock = False
            raise LeadershipLost("the single-runner advisory lock is no longer held")

    async def wait_for_wake(self, timeout: float, stop: asyncio.Event) -> bool:
        """Wait for a NOTIFY, the timeout or stop; True when a notification woke us."""
        conn = self._connection()

        async def first_notify() -> bool:
            async for _ in conn.notifies(timeout=timeout, stop_after=1):
                return True
            return False

        notified = asyncio.ensure_future(first_notify())
        stopping = asyncio.ensure_future(stop.wait())
        done, pending = await asyncio.wait(
            {notified, stopping}, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if notified in done:
            woke = notified.result()
            # Several commits may have notified meanwhile; one pass serves them all.
            async for _ in conn.notifies(timeout=0):
                pass
            return woke
        return False

    async def close(self) -> None:
        """Release the lock (if held) and close; closing alone would release it too."""
        conn, self.conn = self.conn, None
        if conn is None or conn.closed:
            return
        try:
            if self.holds_lock:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except psycopg.Error:
            logger.warning("could not unlock cleanly; closing the session releases it")
        finally:
            self.holds_lock = False
            await conn.close()

    def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None:
            raise RuntimeError("Leader.connect() first")
        return self.conn
