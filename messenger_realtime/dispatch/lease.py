"""The single-runner lease: the advisory lock plus a heartbeat that proves its holder lives.

A session advisory lock outlives a wedged worker (stopped, deadlocked, paused by the
kernel): its connection stays up, so the lock stays held. The holder therefore stamps
messenger.realtime_dispatch_lease.heartbeat_at with the database clock on its lock
session at least every LOCK_TTL/3 (a fair claim proves the lease in its own statement
instead: sql.WALK_AND_CLAIM). A standby whose lock attempt
fails looks at the stamp: older than the holder's LOCK_TTL (the lease row names it, so a
mismatched setting cannot make a live holder look stale), it ends the holder's session
with pg_terminate_backend (which frees the lock) and takes the lock itself. Both sides
read the database clock, so the workers' clocks do not matter.

The SQL lives here, not in sql.py: it touches the lease table only, never the outbox.
"""

import logging
import os
import socket
import time
from typing import Any

import psycopg

from messenger_realtime.ops.logging import Field

logger = logging.getLogger(__name__)
Conn = psycopg.AsyncConnection[Any]

TERMINATE_WAIT_MS = 5000  # pg_terminate_backend waits this long for the backend to exit

# Take the lock and, in the same statement (so the same commit), name this session as the
# holder with a fresh heartbeat. The CTE runs pg_try_advisory_lock exactly once (a volatile
# function keeps it materialised); no row comes back when the lock is busy. The row
# carries the holder's LOCK_TTL: every worker judges the lease by it (_STALE_AFTER).
ACQUIRE = """
WITH lock AS (SELECT pg_try_advisory_lock(%(key)s) AS held)
INSERT INTO messenger.realtime_dispatch_lease AS l
    (lock_key, holder_pid, holder, partitions, lock_ttl, acquired_at, heartbeat_at)
SELECT %(lock_key)s, pg_backend_pid(), %(holder)s, %(partitions)s, %(ttl)s, now(), now()
FROM lock WHERE lock.held
ON CONFLICT (lock_key) DO UPDATE SET
    holder_pid = excluded.holder_pid, holder = excluded.holder,
    partitions = excluded.partitions, lock_ttl = excluded.lock_ttl,
    acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at
RETURNING l.holder_pid
"""

# Acquisitions of one LOCK_KEY's leases, whatever their partition count, one at a time (a
# transaction lock, before OTHER_COUNT and ACQUIRE): two workers of different counts
# cannot both find the other absent and both lead. Tried, never waited for: a session
# frozen inside its acquisition must not hang the others (false: stand by, poll again).
ACQUIRE_TURN = "SELECT pg_try_advisory_xact_lock(%(turn)s)"

# The partition count of a lease row: the column (migration 0008), else what an older
# worker's LOCK_KEY says (LOCK_KEY#partition-i-of-K), else a single runner's 1.
_COUNT = r"""coalesce(
    partitions, (regexp_match(lock_key, '#partition-\d+-of-(\d+)$'))[1]::int, 1)"""
_SCHEME = "(lock_key = %(base)s OR starts_with(lock_key, %(base)s || '#partition-'))"
_OTHER = f"{_SCHEME} AND {_COUNT} <> %(partitions)s"
# A lease is stale once its heartbeat is older than its *holder's* LOCK_TTL (it stamps
# every third of that), whatever the reader's: with mismatched settings a short-TTL
# standby would otherwise end a live leader. NULL: a holder from before migration 0009,
# judged by the reader's own LOCK_TTL.
_STALE_AFTER = "coalesce(lock_ttl, %(ttl)s)"
_FRESH = f"heartbeat_at >= now() - make_interval(secs => {_STALE_AFTER})"

# A live lease of this LOCK_KEY with another partition count (a rolling change of
# DISPATCH_PARTITIONS): this worker must not lead beside it. Stale ones are deleted first,
# as a standby of their own count would end their holder: a holder that resumes then
# finds its lease gone at its next heartbeat, before it claims or pushes (leader.py).
OTHER_COUNT = f"""
WITH stale AS (
    DELETE FROM messenger.realtime_dispatch_lease WHERE {_OTHER} AND NOT {_FRESH}
)
SELECT {_COUNT}, holder FROM messenger.realtime_dispatch_lease
WHERE {_OTHER} AND {_FRESH}
ORDER BY heartbeat_at DESC LIMIT 1
"""

# Only the session named as holder can stamp: no row back means the lease was taken over.
HEARTBEAT = """
UPDATE messenger.realtime_dispatch_lease SET heartbeat_at = now()
WHERE lock_key = %(lock_key)s AND holder_pid = pg_backend_pid()
RETURNING holder_pid
"""

# Graceful exit: drop the lease row and the lock, so a standby leads at its next poll.
RELEASE = """
WITH gone AS (
    DELETE FROM messenger.realtime_dispatch_lease
    WHERE lock_key = %(lock_key)s AND holder_pid = pg_backend_pid()
)
SELECT pg_advisory_unlock(%(key)s)
"""

# Who holds the lock in this database (a bigint advisory key shows in pg_locks as
# classid = high 32 bits, objid = low 32 bits, objsubid = 1), and what the lease says.
# Exclusive holders only: partitioned leaders hold the single-runner key *shared* (their
# guard, runner.py), which a single runner must wait for, never end.
HOLDER = """
SELECT l.pid, lease.holder_pid, lease.holder,
       extract(epoch FROM now() - lease.heartbeat_at)::float8, coalesce(lease.lock_ttl, %(ttl)s)
FROM pg_locks AS l
LEFT JOIN messenger.realtime_dispatch_lease AS lease ON lease.lock_key = %(lock_key)s
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.mode = 'ExclusiveLock'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (%(key)s >> 32) & 4294967295
  AND l.objid::bigint = %(key)s & 4294967295
"""

# The re-check under the row lock: a heartbeat committing meanwhile waits for this
# transaction and then finds its session gone, or it committed first and we see it fresh.
LOCKED_LEASE = f"""
SELECT holder_pid, extract(epoch FROM now() - heartbeat_at)::float8, {_STALE_AFTER}
FROM messenger.realtime_dispatch_lease WHERE lock_key = %(lock_key)s
FOR UPDATE
"""

TERMINATE = "SELECT pg_terminate_backend(%(pid)s, %(wait_ms)s)"

# A partition leader's guard: the single-runner key in share mode, held for its session.
# Partition leaders share it; a single runner (DISPATCH_PARTITIONS=1) holds it exclusively.
# So the two schemes never lead at once (a half-done switch of DISPATCH_PARTITIONS waits
# instead of running two leaders for one chat).
GUARD = "SELECT pg_try_advisory_lock_shared(%(guard)s)"


def holder_name() -> str:
    """host:pid of this worker process, written beside the session pid for operators."""
    return f"{socket.gethostname()}:{os.getpid()}"[:255]


class Standby:
    """A standby's view of the lease: decides when the holder is stale and ends it."""

    def __init__(self, lock_key: str, key: int, ttl: float) -> None:
        """ttl: this worker's LOCK_TTL (for holders that name none: no lease row, or one
        from before migration 0009)."""
        self.params = {"lock_key": lock_key, "key": key, "ttl": ttl}
        self.ttl = ttl
        # A lock holder without a lease row of its own (an older worker, a person's psql
        # session, or a leader between its lock and its commit): first seen when, by us.
        self.unleased: tuple[int, float] | None = None
        self.refused: int | None = None  # a pid we may not terminate (logged once)

    async def take_over_if_stale(self, conn: Conn) -> bool:
        """End a stale holder's session; True when the lock is free to take now."""
        cur = await conn.execute(HOLDER, self.params)
        row = await cur.fetchone()
        if row is None:
            self.unleased = None
            return True  # released since our attempt
        lock_pid, lease_pid, holder, age, stale_after = row
        fields: dict[str, Any] = {"action": "take_over", Field.HOLDER_PID: lock_pid}
        try:
            if lease_pid != lock_pid:
                now = time.monotonic()
                if self.unleased is None or self.unleased[0] != lock_pid:
                    self.unleased = (lock_pid, now)
                if now - self.unleased[1] <= self.ttl:
                    return False
                fields["reason"] = "lock held without a lease"
                return await self._terminate(conn, lock_pid, fields)
            self.unleased = None
            if age is None or age <= stale_after:
                return False
            async with conn.transaction():
                cur = await conn.execute(LOCKED_LEASE, self.params)
                again = await cur.fetchone()
                if again is None or again[0] != lock_pid or again[1] <= again[2]:
                    return False  # a heartbeat landed meanwhile
                fields.update(
                    {"reason": "stale heartbeat", Field.HOLDER: holder, Field.LEASE_AGE: again[1]}
                )
                return await self._terminate(conn, lock_pid, fields)
        except psycopg.errors.InsufficientPrivilege:
            if self.refused != lock_pid:
                logger.error(
                    "stale dispatch lease, but this role may not end the holder's session"
                    " (grant pg_signal_backend, or run every worker as one role)",
                    extra=fields,
                )
                self.refused = lock_pid
            return False

    async def _terminate(self, conn: Conn, pid: int, fields: dict[str, Any]) -> bool:
        cur = await conn.execute(TERMINATE, {"pid": pid, "wait_ms": TERMINATE_WAIT_MS})
        row = await cur.fetchone()
        logger.warning("stale dispatch lease: ended the holder's session", extra=fields)
        self.unleased = None
        return bool(row and row[0])
