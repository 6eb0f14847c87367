"""Waits on the network while they last: which dependency a process waits on, how long.

Every wait for a reply from PostgreSQL or Redis that the process bounds (a statement on
the worker's connections, the hub's blocking receive, its probes of each Redis server)
is entered here for as long as it lasts. NETWORK_TIMEOUT ends such a wait (the
connection is dropped and made again, and the wait is counted in
messenger_realtime_network_timeouts_total{dependency}); until then,
messenger_realtime_network_wait_seconds{dependency} shows the oldest one's age past what
it may take (a blocking receive may take its own block time). A wait still there past
twice NETWORK_TIMEOUT means a bound failed and the process is wedged: /health/live of the
worker (ops/health.py) and of Daphne (ops/webhealth.py) answers 503, naming the
dependency and the seconds, so a supervisor replaces the process.

One object per process (WAITS): the channel layer that records the hub's waits is built
by Channels from the settings, so nothing could hand it one.
"""

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Iterator

from messenger_realtime.ops import metrics

POSTGRESQL, REDIS = "postgresql", "redis"
DEPENDENCIES = (POSTGRESQL, REDIS)
# A wait past this many times its bound (NETWORK_TIMEOUT) was not ended by it: a wedge.
WEDGED_AFTER = 2.0


class NetworkWaits:
    """The waits in flight, read by the probes and the metric from other threads."""

    def __init__(self) -> None:
        # token -> (dependency, when its reply is due, the bound that should end it)
        self._waits: dict[int, tuple[str, float, float]] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def waiting(self, dependency: str, bound: float, allowance: float = 0.0) -> Iterator[None]:
        """A wait on `dependency` for as long as the block runs, which `bound` seconds
        past its due time should end (NETWORK_TIMEOUT); it may take `allowance` seconds
        (a blocking receive's block time) before it is due."""
        token = next(self._tokens)
        with self._lock:
            self._waits[token] = (dependency, time.monotonic() + allowance, bound)
        try:
            yield
        finally:
            with self._lock:
                self._waits.pop(token, None)

    def overdue(self, dependency: str) -> float:
        """Seconds the oldest wait on `dependency` is past its reply's due time (0: none)."""
        now = time.monotonic()
        with self._lock:
            dues = [due for dep, due, _ in self._waits.values() if dep == dependency]
        return max(0.0, now - min(dues)) if dues else 0.0

    def wedged(self) -> dict[str, float]:
        """Dependency -> seconds overdue, for the dependencies with a wait overdue by more
        than WEDGED_AFTER times its bound: the bound failed, the process is wedged."""
        now = time.monotonic()
        with self._lock:
            waits = list(self._waits.values())
        found: dict[str, float] = {}
        for dependency, due, bound in waits:
            if now - due > WEDGED_AFTER * bound:
                found[dependency] = max(found.get(dependency, 0.0), round(now - due, 3))
        return found

    def timed_out(self, dependency: str) -> None:
        """A connection to `dependency` was silent for NETWORK_TIMEOUT and is dropped."""
        metrics.network_timeouts.labels(dependency=dependency).inc()


WAITS = NetworkWaits()
for _dependency in DEPENDENCIES:  # every series exists from the start, at 0
    metrics.network_timeouts.labels(dependency=_dependency)
    metrics.network_wait.labels(dependency=_dependency).set_function(
        functools.partial(WAITS.overdue, _dependency)
    )
