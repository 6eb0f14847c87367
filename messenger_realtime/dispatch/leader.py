"""Single-runner leadership (the lease) and wake-ups, each on a dedicated connection.

The lease connection holds the session advisory lock and stamps the lease's heartbeat
(dispatch/lease.py) from a task, every LOCK_TTL/3, and before each suspect's claim. A
fair claim proves the lease in its own statement (the lease row must still name this
lease session: sql.WALK_AND_CLAIM), so a claim costs no heartbeat round trip. A heartbeat
or claim that finds the session gone or the lease taken over raises LeadershipLost and
the run loop reconnects and stands by. Before each push the leader also checks, on its own clock,
that the lease was proven less than 2/3 LOCK_TTL ago (a standby waits for more than
LOCK_TTL), else it proves it again first: a leader resumed after a stop therefore learns
it lost the lease before it pushes or claims anything.

The LISTEN connection exists only while leading (a standby reads no notifications, which
would otherwise pile up in its client). Polling is the safety net; NOTIFY only cuts latency.
"""

import asyncio
import hashlib
import logging
import time
from typing import Any

import psycopg

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import lease
from messenger_realtime.dispatch.wakes import Wake, WakePolicy, wait_for_wake
from messenger_realtime.exceptions import LeadershipLost, describe_error
from messenger_realtime.ops.logging import Field
from messenger_realtime.outbox.notify import NOTIFY_CHANNEL

logger = logging.getLogger(__name__)

FRESH_FOR = 2 / 3  # of LOCK_TTL: a push needs a lease proven more recently than this


def advisory_key(lock_key: str) -> int:
    """A stable signed 64-bit advisory lock id for LOCK_KEY (same in every process)."""
    return int.from_bytes(hashlib.sha256(lock_key.encode()).digest()[:8], "big", signed=True)


class Leader:
    """The worker's lease and wake-up connections."""

    def __init__(
        self, lock_key: str, lock_ttl: float, alias: str = "default", guard_key: str = ""
    ) -> None:
        """guard_key: a partition leader's single-runner LOCK_KEY, held shared (lease.GUARD)."""
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
            "holder": lease.holder_name(),
            "ttl": lock_ttl,  # written into the lease: standbys judge it by this
        }
        self.standby = lease.Standby(lock_key, self.key, lock_ttl)
        self.conn: psycopg.AsyncConnection[Any] | None = None  # the lock and the heartbeat
        self.listen_conn: psycopg.AsyncConnection[Any] | None = None
        self.holds_lock = False
        self.proven_at = float("-inf")  # monotonic time of the last heartbeat that held
        self.lost = asyncio.Event()

    @property
    def heartbeat_interval(self) -> float:
        return self.lock_ttl / 3

    async def connect(self) -> None:
        """Open the lease connection (no lock yet)."""
        self.conn = await db.connect(self.alias)
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

    async def listen(self) -> None:
        """LISTEN for new rows on a connection of its own (before the catch-up pass)."""
        if self.listen_conn is None or self.listen_conn.closed:
            self.listen_conn = await db.connect(self.alias)
            await self.listen_conn.execute(f"LISTEN {NOTIFY_CHANNEL}")

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
            cur = await conn.execute(lease.GUARD, self.guard)
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
                cur = await conn.execute(lease.ACQUIRE_TURN, self.scheme)
                turn = await cur.fetchone()
                if not (turn and turn[0]) or await self._other_count_leads(conn, partitions):
                    break
                cur = await conn.execute(lease.ACQUIRE, {**self.params, "partitions": partitions})
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
        cur = await conn.execute(lease.OTHER_COUNT, {**self.scheme, "partitions": partitions})
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
        cur = await self._connection().execute(lease.HOLDER, self.standby.params)
        return await cur.fetchone() is None

    async def heartbeat(self) -> None:
        """Prove the lease (stamp it with the database clock); LeadershipLost if it is gone."""
        conn = self._connection()
        sent = time.monotonic()
        try:
            cur = await conn.execute(lease.HEARTBEAT, self.params)
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
        """Heartbeat every LOCK_TTL/3 while leading (a task); ends when the lease is lost."""
        while not self.lost.is_set():
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self.heartbeat()
            except (LeadershipLost, psycopg.Error) as exc:
                self._lose()  # the next claim or push raises; the idle wait ends now
                logger.warning(
                    "dispatch lease lost",
                    extra={"action": "lease_lost", Field.ERROR_CODE: describe_error(exc)},
                )

    async def wait_for_wake(
        self, timeout: float, stop: asyncio.Event, policy: WakePolicy | None = None
    ) -> Wake:
        """Wait for a NOTIFY, the timeout, stop or a lost lease (wakes.wait_for_wake)."""
        if self.listen_conn is None:
            raise RuntimeError("Leader.listen() first")
        return await wait_for_wake(self.listen_conn, timeout, (stop, self.lost), policy)

    async def close(self) -> None:
        """Give the lease and the lock back (if held) and close; closing alone frees the
        lock too (the next holder then overwrites the lease row)."""
        conn, self.conn = self.conn, None
        listen_conn, self.listen_conn = self.listen_conn, None
        if listen_conn is not None and not listen_conn.closed:
            await listen_conn.close()
        self.guarded = False  # a session's locks end with it
        if conn is None or conn.closed:
            self.holds_lock = False
            return
        try:
            if self.holds_lock:
                await conn.execute(lease.RELEASE, self.params)
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
