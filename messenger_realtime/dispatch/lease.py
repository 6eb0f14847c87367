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

Its statements are queries.sql's LEASE_* (sql.py names them), beside the claims that
prove the lease.

The holder's side, Leader: the lease connection holds the session advisory lock and
stamps the heartbeat from a task, every LOCK_TTL/3, and before each suspect's claim. A
fair claim proves the lease in its own statement (the lease row must still name this
lease session: WALK_AND_CLAIM), so a claim costs no heartbeat round trip. A heartbeat or
claim that finds the session gone or the lease taken over raises LeadershipLost, and the
run loop reconnects and stands by. Before each push the leader also checks, on its own
clock, that the lease was proven less than 2/3 LOCK_TTL ago (a standby waits for more
than LOCK_TTL), else it proves it again first: a leader resumed after a stop therefore
learns it lost the lease before it pushes or claims anything. The standby's side:
Standby.take_over_if_stale.

A silent lease connection (a lost flow: the server's session lives on, holding the
lock) is noticed by the keeper: between heartbeats it probes the connection every half
NETWORK_TIMEOUT, and a probe or heartbeat unanswered for NETWORK_TIMEOUT fails the
connection (connections.BoundedConnection): the lease is lost. The worker then abandons
that session without a word to it (a release would only wait on the silence again) and,
reconnected, ends it itself: a lock held by a session this Leader abandoned, whose lease
row names this very process, is its own and is ended at once, not after LOCK_TTL.
"""

import asyncio
import hashlib
import logging
import os
import socket
import time
from typing import Any

import psycopg

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import sql
from messenger_realtime.exceptions import LeadershipLost, describe_error
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
Conn = psycopg.AsyncConnection[Any]

TERMINATE_WAIT_MS = 5000  # pg_terminate_backend waits this long for the backend to exit
ABANDONED_KEPT = 8  # lease sessions of ours a Standby remembers to end (Leader.close)


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
        # Backend pids of lease sessions this worker abandoned (their connection went
        # silent): still holding the lock on the server, they are ours to end.
        self.abandoned: set[int] = set()
        # A lock holder without a lease row of its own (an older worker, a person's psql
        # session, or a leader between its lock and its commit): first seen when, by us.
        self.unleased: tuple[int, float] | None = None
        self.refused: int | None = None  # a pid we may not terminate (logged once)

    async def take_over_if_stale(self, conn: Conn) -> bool:
        """End a stale holder's session; True when the lock is free to take now."""
        cur = await conn.execute(sql.LEASE_HOLDER, self.params)
        row = await cur.fetchone()
        if row is None:
            self.unleased = None
            return True  # released since our attempt
        lock_pid, lease_pid, holder, age, stale_after = row
        fields: dict[str, Any] = {"action": "take_over", Field.HOLDER_PID: lock_pid}
        try:
            if lock_pid in self.abandoned and lease_pid == lock_pid and holder == holder_name():
                # This process's own session, left on a silent connection: no one else's
                # lease (the row names this process; a reused pid would not), so no wait.
                fields.update({"reason": "own abandoned session", Field.HOLDER: holder})
                self.abandoned.discard(lock_pid)
                return await self._terminate(conn, lock_pid, fields)
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
                cur = await conn.execute(sql.LEASE_LOCKED, self.params)
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

    def abandon(self, pid: int) -> None:
        """A lease session of ours left on a failed connection (a few kept: each ends
        itself once the server notices, and pids may be reused)."""
        self.abandoned = {*list(self.abandoned)[-(ABANDONED_KEPT - 1) :], pid}

    async def _terminate(self, conn: Conn, pid: int, fields: dict[str, Any]) -> bool:
        # Waiting for the backend's exit must end inside the connection's own bound.
        bound_ms = int(getattr(conn, "network_timeout", 10.0) * 500)
        wait_ms = min(TERMINATE_WAIT_MS, bound_ms)
        cur = await conn.execute(sql.LEASE_TERMINATE, {"pid": pid, "wait_ms": wait_ms})
        row = await cur.fetchone()
        logger.warning("stale dispatch lease: ended the holder's session", extra=fields)
        self.unleased = None
        return bool(row and row[0])


FRESH_FOR = 2 / 3  # of LOCK_TTL: a push needs a lease proven more recently than this


def advisory_key(lock_key: str) -> int:
    """A stable signed 64-bit advisory lock id for LOCK_KEY (same in every process)."""
    return int.from_bytes(hashlib.sha256(lock_key.encode()).digest()[:8], "big", signed=True)


class Leader:
    """The worker's lease session: the lock, the heartbeat, the proofs."""

    def __init__(
        self, lock_key: str, lock_ttl: float, alias: str = "default", guard_key: str = ""
    ) -> None:
        """guard_key: a partition leader's single-runner LOCK_KEY, held shared (sql.LEASE_GUARD)."""
        self.key = advisory_key(lock_key)
        self.guard = {"guard": advisory_key(guard_key)} if guard_key else None
        self.guarded = False  # this session holds the guard (taken once per session)
        self.guard_warned = False
        base = guard_key or lock_key  # the LOCK_KEY setting: every partition count's leases
        self.scheme = {"base": base, "turn": advisory_key(f"{base}#acquire"), "ttl": lock_ttl}
        self.other_count_seen: int | None = None  # logged once per other count
        self.lock_ttl = lock_ttl
        self.alias = alias
        self.params = {
            "lock_key": lock_key,
            "key": self.key,
            "holder": holder_name(),
            "ttl": lock_ttl,  # written into the lease: standbys judge it by this
        }
        self.standby = Standby(lock_key, self.key, lock_ttl)
        self.conn: psycopg.AsyncConnection[Any] | None = None  # the lock and the heartbeat
        self.backend_pid = 0  # the lease session's server pid, while it may live
        self.holds_lock = False
        self.proven_at = float("-inf")  # monotonic time of the last heartbeat that held
        self.lost = asyncio.Event()

    @property
    def heartbeat_interval(self) -> float:
        return self.lock_ttl / 3

    @property
    def probe_interval(self) -> float:
        """How often the keeper looks at the lease connection between heartbeats: half
        its NETWORK_TIMEOUT, so a silent one is noticed within 1.5 x NETWORK_TIMEOUT."""
        bound = float(getattr(self.conn, "network_timeout", self.heartbeat_interval))
        return min(self.heartbeat_interval, bound / 2)

    async def connect(self) -> None:
        """Open the lease connection (no lock yet)."""
        self.conn = await db.connect(self.alias)
        self.backend_pid = self.conn.info.backend_pid
        self.lost = asyncio.Event()
        # A vanished host's session (and so its lock) ends within ~2/3 of LOCK_TTL; a
        # wedged process that stays connected is what the heartbeat is for.
        idle = max(1, int(self.lock_ttl / 3))
        interval = max(1, int(self.lock_ttl / 9))
        # Heartbeats need not survive a crash (a lost one only looks older to a standby),
        # so they do not wait for the WAL flush: a stamp before every claim stays cheap.
        # This session's transactions (an acquisition, a take-over) last milliseconds; one
        # left open by a frozen process would hold the acquisition turn or the lease row's
        # lock for ever, so the server ends such a session after LOCK_TTL/3.
        await self.conn.execute(
            f"SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = {interval};"
            " SET tcp_keepalives_count = 3; SET synchronous_commit = off;"
            f" SET idle_in_transaction_session_timeout = {idle * 1000}"
        )

    async def try_acquire(self, partitions: int = 1) -> bool:
        """Take the lock and the lease if free, or if the holder's lease went stale
        (ending its session); never waits for a lock (a live holder's, another worker's
        acquisition turn). `partitions`: this worker's DISPATCH_PARTITIONS; none of it
        leads while a live lease names another."""
        try:
            return await self._try_acquire(self._connection(), partitions)
        except psycopg.errors.IdleInTransactionSessionTimeout as exc:  # see connect()
            self._lose()
            raise LeadershipLost(
                "the lease session was ended while frozen mid-acquisition"
            ) from exc

    async def _try_acquire(self, conn: psycopg.AsyncConnection[Any], partitions: int) -> bool:
        if self.guard is not None and not self.guarded:
            cur = await conn.execute(sql.LEASE_GUARD, self.guard)
            row = await cur.fetchone()
            self.guarded = bool(row and row[0])
            if not self.guarded:
                logger.log(
                    logging.DEBUG if self.guard_warned else logging.WARNING,
                    "a single runner (DISPATCH_PARTITIONS=1) leads: partitions wait for it",
                    extra={"action": "skip"},
                )
                self.guard_warned = True
                return False
        for _ in range(2):
            sent = time.monotonic()
            async with conn.transaction():
                cur = await conn.execute(sql.LEASE_ACQUIRE_TURN, self.scheme)
                turn = await cur.fetchone()
                if not (turn and turn[0]) or await self._other_count_leads(conn, partitions):
                    break
                cur = await conn.execute(
                    sql.LEASE_ACQUIRE, {**self.params, "partitions": partitions}
                )
                acquired = await cur.fetchone() is not None
            if acquired:
                self.holds_lock, self.proven_at = True, sent
                return True
            if not await self.standby.take_over_if_stale(conn):
                break
        self.holds_lock = False
        return False

    async def _other_count_leads(self, conn: psycopg.AsyncConnection[Any], partitions: int) -> bool:
        """A live leader of this LOCK_KEY runs with another DISPATCH_PARTITIONS: leading
        beside it would give some chats two leaders (their partitions differ), so stand
        by until it stops (an error, once per other count: the setting must agree)."""
        cur = await conn.execute(sql.LEASE_OTHER_COUNT, {**self.scheme, "partitions": partitions})
        row = await cur.fetchone()
        if row is None:
            self.other_count_seen = None
            return False
        if row[0] != self.other_count_seen:
            logger.error(
                "DISPATCH_PARTITIONS differs from a live leader's: standing by until it stops"
                " (set the same DISPATCH_PARTITIONS on every worker)",
                extra={
                    "action": "skip",
                    "partitions": partitions,
                    "leader_partitions": row[0],
                    Field.HOLDER: row[1],
                },
            )
            self.other_count_seen = row[0]
        return True

    async def lock_is_free(self) -> bool:
        """Nobody holds this lock exclusively now (a hint: it may change at once)."""
        cur = await self._connection().execute(sql.LEASE_HOLDER, self.standby.params)
        return await cur.fetchone() is None

    async def heartbeat(self) -> None:
        """Prove the lease (stamp it with the database clock); LeadershipLost if it is gone."""
        conn = self._connection()
        sent = time.monotonic()
        try:
            cur = await conn.execute(sql.LEASE_HEARTBEAT, self.params)
            held = await cur.fetchone() is not None
        except psycopg.OperationalError as exc:  # our session was ended, or the server
            self._lose()
            raise LeadershipLost("the lease session is gone") from exc
        if not held:
            self._lose()
            raise LeadershipLost("another worker took the lease over")
        self.proven_at = max(self.proven_at, sent)

    async def ensure_held(self) -> None:
        """Before a suspect's claim: raise LeadershipLost unless the lease is still ours."""
        await self.heartbeat()

    def lease_proof(self) -> dict[str, Any]:
        """What a fair claim checks the lease row against in its own statement (instead of
        a heartbeat round trip first: sql.WALK_AND_CLAIM); LeadershipLost if already lost."""
        conn = self.conn
        if self.lost.is_set() or not self.holds_lock or conn is None or conn.closed:
            raise LeadershipLost("the lease was lost")
        return {
            "lease_key": self.params["lock_key"],
            "lease_pid": conn.info.backend_pid,
            # pg_locks shows a bigint advisory key as two unsigned 32-bit halves
            "lease_classid": (self.key >> 32) & 0xFFFFFFFF,
            "lease_objid": self.key & 0xFFFFFFFF,
        }

    def proven(self, sent: float) -> None:
        """A claim sent at `sent` (monotonic) found the lease still ours."""
        self.proven_at = max(self.proven_at, sent)

    async def ensure_fresh(self) -> None:
        """Before every push: cheap when the lease was proven lately, else prove it now."""
        if self.lost.is_set():
            raise LeadershipLost("the lease was lost")
        if time.monotonic() - self.proven_at >= self.lock_ttl * FRESH_FOR:
            await self.heartbeat()

    async def keep(self) -> None:
        """Heartbeat every LOCK_TTL/3 while leading (a task), and probe the connection
        (SELECT 1, no write) between heartbeats every probe_interval; ends when the lease
        is lost (a failed heartbeat, or a probe unanswered: a silent connection)."""
        stamped = time.monotonic()
        while not self.lost.is_set():
            await asyncio.sleep(self.probe_interval)  # a period, not synchronisation
            try:
                if time.monotonic() - stamped >= self.heartbeat_interval - 0.01:
                    await self.heartbeat()
                    stamped = time.monotonic()
                else:
                    await self._connection().execute("SELECT 1")
            except (LeadershipLost, psycopg.Error) as exc:
                self._lose()  # the next claim or push raises; the idle wait ends now
                logger.warning(
                    "dispatch lease lost",
                    extra={"action": "lease_lost", Field.ERROR_CODE: describe_error(exc)},
                )

    async def close(self, abandon: bool = False) -> None:
        """Give the lease and the lock back (if held) and close; closing alone frees the
        lock too (the next holder then overwrites the lease row). abandon: the session
        may be unreachable (a connection failed): close without a word to it, and end it
        from the next session if it still holds the lock (Standby.abandoned)."""
        conn, self.conn = self.conn, None
        self.guarded = False  # a session's locks end with it
        if abandon and conn is not None:
            if self.backend_pid:  # (read at connect: a failed connection no longer knows)
                self.standby.abandon(self.backend_pid)
            self.holds_lock = False
            await conn.close()
            return
        if conn is None or conn.closed:
            self.holds_lock = False
            return
        try:
            if self.holds_lock:
                await conn.execute(sql.LEASE_RELEASE, self.params)
        except psycopg.Error:
            logger.warning("could not unlock cleanly; closing the session releases it")
        finally:
            self.holds_lock = False
            await conn.close()

    def _lose(self) -> None:
        self.holds_lock = False
        self.lost.set()

    def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None:
            raise RuntimeError("Leader.connect() first")
        return self.conn
