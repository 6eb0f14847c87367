"""A connection's in-process queue of what the channel layer brought it (hub/fanout.py).

Bounded: a connection that falls `capacity` messages behind loses what it holds and gets
one overrun message instead, which closes it with allowReconnect (its client resyncs);
never a silent drop. While the connection drains it (its delivery task runs), what it
holds counts towards the process's backlog, which decides whether the process's reader
takes more from Redis, but at most `share` of it (a frame's worth): one connection that
keeps taking, however slowly, never holds the reader for the others on its own; only
many connections behind at once do (the process is behind). A slow one falls behind
alone, up to `capacity`, and then is told (overrun).

A connection that does not drain yet (handshake pending) is left out, and so is one that
took nothing for a while with messages waiting (stalled: its delivery is stuck in a slow
domain read, say) until it takes again.

A volatile message (VOLATILE in it: a typing indicator, hub/connection/composing.py) is
the first thing dropped: it enters only an inbox that drains and holds nothing else than
volatile messages, fewer than VOLATILE_ROOM (several members typing at once all show,
but never behind a real event), so an inbox's volatile messages are all at its head, and
a message that finds the inbox full pushes the first of them out rather than overrun it.
A volatile flood never costs a real event.

An idle inbox holds nothing but its counters: no queue until a message comes, no event
to wait on. Its connection is told (`wake`) when a message arrives while it drains, and
starts a delivery task only then (hub/connection/outbound.py), so an idle connection has no task
of its own. A stalled inbox is bounded by `stalled_capacity`
(the process's backlog limit) instead: it was already that far behind when it stalled,
so its client is told at once rather than after `capacity` (10,000 by default) messages
held in memory for it.
"""

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from messenger_realtime.backplane.layer import OVERRUN_EVENT
from messenger_realtime.ops import metrics

OVERRUN_MESSAGE: dict[str, Any] = {"type": OVERRUN_EVENT}
VOLATILE = "volatile"  # a message's key: true when dropping it loses nothing that matters
VOLATILE_ROOM = 32  # volatile messages an inbox holds at most (with nothing else waiting)


class Inbox:
    def __init__(
        self,
        capacity: int,
        count: Callable[[int], None],
        stalled_capacity: int | None = None,
        share: int | None = None,
    ) -> None:
        self.capacity = capacity
        self.stalled_capacity = capacity if stalled_capacity is None else stalled_capacity
        self.share = capacity if share is None else share  # the most it adds to the backlog
        self._count = count  # adds a delta to the process's backlog
        self._queue: collections.deque[dict[str, Any]] | None = None  # while it holds any
        self._waiter: asyncio.Future[None] | None = None  # take() waiting
        self._wake: Callable[[], None] | None = None  # its connection, while it drains
        self._counted = 0  # what this inbox added to the backlog (all of it while counted)
        self.draining = False
        self.stalled = False  # left out of the backlog until it takes again
        self.last_take = time.monotonic()

    def __len__(self) -> int:
        return len(self._queue) if self._queue is not None else 0

    def put(self, message: dict[str, Any]) -> None:
        queue = self._queue
        if message.get(VOLATILE) and (
            not self.draining
            or (queue and (len(queue) >= VOLATILE_ROOM or not queue[-1].get(VOLATILE)))
        ):
            return  # dropped first: never queued behind a real one, nor before the handshake
        if queue is None:  # it was up to date until now: it is behind (stalls) from here
            queue = self._queue = collections.deque()
            self.last_take = time.monotonic()
        if len(queue) >= (self.stalled_capacity if self.stalled else self.capacity):
            if queue[0].get(VOLATILE):  # the volatile messages at its head give way first
                queue.popleft()
                queue.append(message)
            else:
                self._overrun(lost=len(queue) + 1)  # what it held, and this one
        else:
            queue.append(message)
        self._ready()
        self._recount()

    def _ready(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._wake is not None:
            self._wake()

    def _overrun(self, lost: int) -> None:
        """Forget what it holds: one overrun message instead, which closes it."""
        metrics.channel_overruns.inc(lost)
        self._queue = collections.deque([OVERRUN_MESSAGE])
        self._ready()

    def take_now(self, most: int) -> list[dict[str, Any]]:
        """The oldest messages, at most `most`, without waiting (none: [])."""
        queue = self._queue
        if not queue:
            return []
        taken = [queue.popleft() for _ in range(min(most, len(queue)))]
        if not queue:
            self._queue = None
        self.last_take, self.stalled = time.monotonic(), False
        self._recount()
        return taken

    async def take(self, most: int) -> list[dict[str, Any]]:
        """The oldest messages, at most `most`; waits while there are none."""
        while not self._queue:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self.take_now(most)

    def stall_if_idle(self, since: float) -> None:
        """Leave the backlog if messages wait and nothing was taken since `since`; already
        at its stalled bound, overrun now (the client hears of it as soon as it takes)."""
        if self._counted and self.last_take < since:
            self.stalled = True
            if len(self) >= self.stalled_capacity:
                self._overrun(lost=len(self))
            self._recount()

    def start_draining(self, wake: Callable[[], None] | None = None) -> None:
        """Its connection takes from now on; `wake` is called whenever a message arrives
        (and now, if some wait already)."""
        self.draining, self._wake = True, wake
        self._recount()
        if wake is not None and self._queue:
            wake()

    def close(self) -> None:
        """Nothing reads it any more: forget what it holds."""
        self._queue, self._wake = None, None
        self.draining = False
        self._recount()

    def _recount(self) -> None:
        counted = min(len(self), self.share) if self.draining and not self.stalled else 0
        if counted != self._counted:
            self._count(counted - self._counted)
            self._counted = counted
