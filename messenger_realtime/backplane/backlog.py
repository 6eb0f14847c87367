"""How far behind the hub processes are, ignoring the ones nobody drains any more.

Backpressure (dispatch/push.py) waits while a hub process's queue is long. A process that
died (kill -9, a lost host) leaves its connections in their groups until channels-redis
forgets them (a day), and its queue stays full: waiting for it would slow every chat with
a member there to a chunk per HUB_BACKLOG_WAIT. So a queue that has not shrunk for
STALL_AFTER seconds counts as stalled and is left out: one dead process never holds back
the others (its lost events are counted as overruns, and its clients reconnect elsewhere).
"""

import time
from collections.abc import Callable, Mapping

STALL_AFTER = 0.5  # seconds without a queue shrinking before it counts as stalled
_REMEMBERED = 4096  # queues remembered at most (one per hub process in practice)


class QueueWatch:
    """Remembers each queue's last depth and when it last shrank."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, stall_after: float = STALL_AFTER
    ) -> None:
        self.clock = clock
        self.stall_after = stall_after
        self._seen: dict[str, tuple[int, float]] = {}  # key -> (depth, when it last shrank)

    def longest_draining(self, depths: Mapping[str, int]) -> int:
        """The longest of these queues that are still being drained (0 if none)."""
        now = self.clock()
        longest = 0
        for key, depth in depths.items():
            previous = self._seen.get(key)
            since = now if previous is None or depth < previous[0] else previous[1]
            self._seen[key] = (depth, since)
            if now - since <= self.stall_after:
                longest = max(longest, depth)
        if len(self._seen) > _REMEMBERED:
            self._seen = {key: self._seen[key] for key in depths}
        return longest
