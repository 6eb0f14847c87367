"""A pass's pacing: coalesced wake-ups, and how often a pass probes for suspects.

Every owner commit NOTIFYs. At a few hundred commits a second each NOTIFY used to wake a
pass of a few rows, and a pass has a fixed cost (the lease stamp, the walk, the claim,
the suspect probe, the build thread hop and its domain reads, the outcome), so the worker
spent more CPU per message at 500 msg/s than at 1,000 (docs/performance.md). Two rules:

- Wake-ups during a stream are coalesced. A NOTIFY that arrives less than WAKE_COALESCE
  after the end of a pass that claimed rows sleeps until WAKE_COALESCE after that end
  (the NOTIFYs meanwhile wait in the socket and are read in one go after it: no loop
  wake-up per commit), and one pass then serves every commit meanwhile: at most one pass
  per WAKE_COALESCE while commits keep coming. A NOTIFY after a quiet spell (the last pass
  ended longer ago) or after a pass that found nothing wakes a pass at once, so an
  isolated event pays nothing; an event close behind another waits at most WAKE_COALESCE
  more. WAKE_COALESCE = 0 turns coalescing off. (The hold used to apply only after a
  pass of three rows or more; at 200 commits a second a pass took one row, and the
  worker's statements and commits per message were half of PostgreSQL's work for
  realtime: docs/performance.md, issue 49, item 2.)
- The suspect probe (batches.run_suspects) runs at most once per POLLING_INTERVAL, and
  in every pass whose batches isolated or retried rows (those are retried alone at once),
  and in the pass after one whose suspects' budget ran out with suspects still due (a
  crashed worker's batches: they drain pass after pass, not one per poll). Suspects
  otherwise come due only after a backoff of seconds, so they wait at most one
  POLLING_INTERVAL more; the first pass after (re)connecting always probes.

The wait itself (Listener.wait) reads the LISTEN connection, which exists only while
the worker leads: a standby reads no notifications, which would otherwise pile up in its
client. Polling is the safety net; NOTIFY only cuts latency. A LISTEN connection only
waits, and a silent one would just look quiet (no NOTIFY ever again, every event a poll
late), so an idle wait first probes it (SELECT 1) when it has not answered for half
NETWORK_TIMEOUT; a probe unanswered for NETWORK_TIMEOUT fails the connection
(connections.BoundedConnection), and the worker reconnects and LISTENs again. Noticed
within max(POLLING_INTERVAL, NETWORK_TIMEOUT / 2) + NETWORK_TIMEOUT.
"""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from messenger_realtime.dispatch import connections as db
from messenger_realtime.outbox.notify import NOTIFY_CHANNEL

# Socket reads one drain may take: a read yields about a thousand NOTIFYs (libpq's buffer),
# so this bounds a drain after a flood while still emptying any realistic backlog.
DRAIN_READS = 100


@dataclass(frozen=True)
class Wake:
    """Why an idle wait ended, and what the wake-up coalesced."""

    notified: bool  # by a NOTIFY (else: the poll timeout, stop, or a lost lease)
    notifies: int = 0  # NOTIFYs this wake counted, the first included (a lower bound)
    held: float = 0.0  # seconds spent waiting for more after the first

    def log_fields(self) -> dict[str, object]:
        reason = "notify" if self.notified else "poll"
        return {"reason": reason, "notifies": self.notifies, "heldMs": round(self.held * 1000, 1)}


class WakePolicy:
    """When a NOTIFY may wake a pass, and whether a pass probes for suspects."""

    def __init__(self, window: float, probe_every: float = 0.0) -> None:
        self.window = window
        self.probe_every = probe_every
        self.last_pass_ended = float("-inf")
        self.last_pass_rows = 0
        self.last_probe = float("-inf")
        self.suspects_left = False

    def pass_ended(self, rows: int, suspects_left: bool = False) -> None:
        """A pass ended, having claimed `rows` rows, and maybe left suspects due."""
        self.last_pass_ended = time.monotonic()
        self.last_pass_rows = rows
        self.suspects_left = suspects_left

    def hold_until(self) -> float | None:
        """The monotonic time a NOTIFY arriving now should wait for, or None: wake now."""
        now = time.monotonic()
        streaming = self.last_pass_rows > 0 and now - self.last_pass_ended < self.window
        return self.last_pass_ended + self.window if self.window > 0 and streaming else None

    def suspects_due(self, retried: int) -> bool:
        """Probe for suspects in this pass (which retried `retried` rows)?"""
        now = time.monotonic()
        if retried or self.suspects_left or now - self.last_probe >= self.probe_every:
            self.last_probe = now
            return True
        return False


async def drain_notifies(conn: psycopg.AsyncConnection[Any]) -> int:
    """Read every NOTIFY already waiting on `conn` without waiting for more; the count.

    One notifies(timeout=0) is one socket read, about a thousand NOTIFYs: after a backlog
    (passes that went on at once read none) a single read left the rest to wake the next
    idle wait at once for a pass with nothing new, read after read.
    """
    total = 0
    for _ in range(DRAIN_READS):
        count = 0
        async for _ in conn.notifies(timeout=0):
            count += 1
        total += count
        if not count:
            break
    return total


async def wait_for_wake(
    conn: psycopg.AsyncConnection[Any],
    timeout: float,
    ends: tuple[asyncio.Event, ...],
    policy: WakePolicy | None = None,
) -> Wake:
    """Wait on the LISTEN connection `conn` for a NOTIFY, the timeout or any of `ends`
    (stop, a lost lease); after a NOTIFY, wait for more while `policy` says the stream is
    coalescing, then read the rest."""

    async def first_notify() -> bool:
        async for _ in conn.notifies(timeout=timeout, stop_after=1):
            return True
        return False

    notified = asyncio.ensure_future(first_notify())
    waits = {notified, *(asyncio.ensure_future(end.wait()) for end in ends)}
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if notified not in done or not notified.result():
        return Wake(notified=False)
    count, held = 1, 0.0
    until = policy.hold_until() if policy is not None else None
    if until is not None:
        # Sleep through the window instead of reading each NOTIFY as it comes: at a few
        # hundred commits a second, waking the loop per NOTIFY cost more CPU than the
        # pass they share. They wait in the socket; the drain below reads them at once.
        # Bounded by WAKE_COALESCE (at most 0.1 s), so a stop request may wait for it.
        started = time.monotonic()
        await asyncio.sleep(until - started)
        held = time.monotonic() - started
    # Several commits may have notified meanwhile; one pass serves them all.
    count += await drain_notifies(conn)
    return Wake(notified=True, notifies=count, held=held)


class Listener:
    """The LISTEN connection of a leading worker, and the wait for a wake on it."""

    def __init__(self, alias: str = "default") -> None:
        self.alias = alias
        self.conn: db.BoundedConnection | None = None
        self.answered = float("-inf")  # when the connection last answered (monotonic)

    async def listen(self) -> None:
        """LISTEN for new rows on a connection of its own (before the catch-up pass)."""
        if self.conn is None or self.conn.closed:
            self.conn = await db.connect(self.alias)
            await self.conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self.answered = time.monotonic()

    async def wait(
        self, timeout: float, ends: tuple[asyncio.Event, ...], policy: WakePolicy | None = None
    ) -> Wake:
        """Wait for a NOTIFY, the timeout or any of `ends` (stop, a lost lease); first
        probe the connection if it has not answered for half its NETWORK_TIMEOUT
        (OperationalError once it stays silent for all of it)."""
        if self.conn is None:
            raise RuntimeError("Listener.listen() first")
        if time.monotonic() - self.answered >= self.conn.network_timeout / 2:
            await self.conn.execute("SELECT 1")  # NOTIFYs meanwhile wait in its backlog
            self.answered = time.monotonic()
        wake = await wait_for_wake(self.conn, timeout, ends, policy)
        if wake.notified:
            self.answered = time.monotonic()
        return wake

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.closed:
            await conn.close()
