"""How far behind the hub processes are, ignoring the ones nobody drains any more.

Backpressure (dispatch/push.py) waits while a hub process's queue is long. A process that
died (kill -9, a lost host) leaves its connections in their groups until channels-redis
forgets them (a day), and its queue stays full: waiting for it would slow every chat with
a member there to a chunk per HUB_BACKLOG_WAIT. So a queue that has not shrunk for
STALL_AFTER seconds counts as stalled and is left out: one dead process never holds back
the others (its lost events are counted as overruns, and its clients reconnect elsewhere).

A dead process's queue shrinks too: every push sweeps the messages older than the layer's
expiry (a minute), as channels-redis does, so from a minute after the death its depth
falls at each push and the rule above would count it as drained again, making every push
wait up to STALL_AFTER (the chaos soak's latency band, docs/reliability.md). A queue that
a live process reads has a young head (its oldest message); one that is only swept has a
head about as old as the expiry. So a queue whose head is older than HEAD_AGE_LIMIT is
left out too: a live process that far behind is as good as stalled for backpressure (it
recovers through overruns, as a dead one's clients do).
"""

import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

STALL_AFTER = 0.5  # seconds without a queue shrinking before it counts as stalled
HEAD_AGE_LIMIT = 30.0  # s: an older head is swept, not read (half channels-redis' expiry)
_REMEMBERED = 4096  # queues remembered at most (one per hub process in practice)


class QueueState(NamedTuple):
    depth: int
    oldest: float | None  # its head's score (time.time() when pushed); None when empty


class QueueWatch:
    """Remembers each queue's last depth and when it last shrank."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        stall_after: float = STALL_AFTER,
        *,
        wall: Callable[[], float] = time.time,
        head_age_limit: float = HEAD_AGE_LIMIT,
    ) -> None:
        self.clock = clock
        self.stall_after = stall_after
        self.wall = wall  # the clock of the queue's scores
        self.head_age_limit = head_age_limit
        self._seen: dict[str, tuple[int, float]] = {}  # key -> (depth, when it last shrank)

    def longest_draining(self, queues: Mapping[str, QueueState]) -> int:
        """The longest of these queues that are still being drained (0 if none)."""
        now, wall = self.clock(), self.wall()
        longest = 0
        for key, (depth, oldest) in queues.items():
            previous = self._seen.get(key)
            since = now if previous is None or depth < previous[0] else previous[1]
            self._seen[key] = (depth, since)
            read = oldest is None or wall - oldest < self.head_age_limit
            if now - since <= self.stall_after and read:
                longest = max(longest, depth)
        if len(self._seen) > _REMEMBERED:
            self._seen = {key: self._seen[key] for key in queues}
        return longest
