"""A pass's pacing: coalesced wake-ups, and how often a pass probes for suspects.

Every owner commit NOTIFYs. At a few hundred commits a second each NOTIFY used to wake a
pass of a few rows, and a pass has a fixed cost (the lease stamp, the walk, the claim,
the suspect probe, the build thread hop and its domain reads, the outcome), so the worker
spent more CPU per message at 500 msg/s than at 1,000 (docs/performance.md). Two rules:

- Wake-ups during a stream are coalesced. A NOTIFY that arrives less than WAKE_COALESCE
  after the end of a pass that claimed STREAM_ROWS rows or more sleeps WAKE_COALESCE more
  (the NOTIFYs meanwhile wait in the socket and are read in one go after it: no loop
  wake-up per commit), and one pass then serves every commit meanwhile. A NOTIFY after a
  quiet spell (the last pass ended longer ago) or after a pass of fewer rows (sparse
  commits) wakes a pass at once, so light traffic pays no extra latency; during a stream
  an event waits at most WAKE_COALESCE more. WAKE_COALESCE = 0 turns coalescing off.
- The suspect probe (batches.run_suspects) runs at most once per POLLING_INTERVAL, and
  in every pass whose batches isolated or retried rows (those are retried alone at once).
  Suspects otherwise come due only after a backoff of seconds, so they wait at most one
  POLLING_INTERVAL more; the first pass after (re)connecting always probes.
"""

import time
from dataclasses import dataclass
from typing import Any

import psycopg

# A pass that claimed fewer rows than this served a sparse stream (commits arrive no
# faster than passes run): the next NOTIFY wakes a pass at once, so light traffic never
# pays the window. From about 50 commits a second passes come back with more, and wait.
STREAM_ROWS = 3
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

    def pass_ended(self, rows: int) -> None:
        """A pass ended, having claimed `rows` rows."""
        self.last_pass_ended = time.monotonic()
        self.last_pass_rows = rows

    def hold_until(self) -> float | None:
        """The monotonic time a NOTIFY arriving now should wait for, or None: wake now."""
        now = time.monotonic()
        dense = self.last_pass_rows >= STREAM_ROWS
        streaming = dense and now - self.last_pass_ended < self.window
        return now + self.window if self.window > 0 and streaming else None

    def suspects_due(self, retried: int) -> bool:
        """Probe for suspects in this pass (which retried `retried` rows)?"""
        now = time.monotonic()
        if retried or now - self.last_probe >= self.probe_every:
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
