"""One timer for every connection of a hub process.

Each connection has deadlines (its handshake, its next keep-alive ping, the client's
timeout, its credentials' expiry, a stateful Ack, the end of a resume window); a task
per connection that slept until the nearest one was most of what an idle connection
cost its process (a task, a coroutine frame and a timeout handle per nap, every ping).
Here each connection has at most one live entry in one heap per event loop (its
HubProcess keeps one Clock per loop: hub/process.py), and one
loop timer is armed at the heap's earliest entry. When it fires, every due entry's
owner is called (`Timed.fire`, synchronous: quick work inline, anything that waits in a
task of its own) and says when it wants to be called next.

The loop timer is armed on a grid of GRANULE seconds, never early: every entry due
within the same granule fires in one call. Keep-alive pings and client timeouts need
no finer time than that, and thousands of idle connections' deadlines, spread over
every instant, would otherwise each cost a loop turn and a re-armed timer
(docs/performance.md).

An entry is moved earlier by pushing a new one and marking the old one dead (a
connection whose deadline moved later just finds nothing to do when called early, and
schedules again); an ended connection's entry is marked dead, so the heap never keeps a
connection alive past its end.
"""

import asyncio
import heapq
import itertools
import math
from typing import Protocol

from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)

GRANULE = 0.05  # seconds: how late a deadline may fire, at most, to share a loop turn


class Timed(Protocol):
    def fire(self, now: float) -> None:
        """Called at (or just after) the time it asked for; schedules its next call."""
        ...


class Entry:
    """One scheduled call: `owner` is None once cancelled or replaced."""

    __slots__ = ("owner", "seq", "when")

    def __init__(self, when: float, seq: int, owner: Timed | None) -> None:
        self.when, self.seq, self.owner = when, seq, owner

    def __lt__(self, other: "Entry") -> bool:
        return (self.when, self.seq) < (other.when, other.seq)


class Clock:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[Entry] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, owner: Timed, when: float, current: Entry | None) -> Entry:
        """Call `owner.fire` at loop time `when`; returns its entry, which replaces
        `current` (its previous one, if any) unless that one is due no later."""
        if current is not None and current.owner is owner and current.when <= when:
            return current
        if current is not None:
            current.owner = None
        entry = Entry(when, next(self._seq), owner)
        heapq.heappush(self._heap, entry)
        at = on_grid(when)
        if at < self._timer_at:
            self._arm(at)
        return entry

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self.loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        heap, now = self._heap, self.loop.time()
        while heap and heap[0].when <= now:
            entry = heapq.heappop(heap)
            owner, entry.owner = entry.owner, None
            if owner is not None:
                try:
                    owner.fire(now)
                except Exception:  # one connection's failure must not stop the others'
                    logger.exception("hub timer failed", extra={"action": "timer"})
        while heap and heap[0].owner is None:  # cancelled at the top: no timer for them
            heapq.heappop(heap)
        if heap:
            self._arm(on_grid(heap[0].when))


def on_grid(when: float) -> float:
    """The first point of the GRANULE grid at or after `when` (never before it)."""
    return max(when, math.ceil(when / GRANULE) * GRANULE)


def cancel(entry: Entry | None) -> None:
    """Forget a scheduled call (its connection ended)."""
    if entry is not None:
        entry.owner = None
