"""How far the database's clock is from this hub process's.

A client's delivery latency (hub/connection/acknowledgements.py) starts at a row's
created_at, stamped by PostgreSQL, and ends at the hub's `time.time()` when the client
acknowledges: two clocks. Their difference is measured, not assumed to be zero: a read
of `clock_timestamp()` between two readings of the process's clock, on the hub's read
thread (hub/reads.py), gives offset = database - midpoint, off by at most half that
round trip. It is measured when the process's first acknowledging connection asks for
it and every MEASURE_EVERY seconds after; of the last KEEP measurements the one with
the shortest round trip is used (a slow round trip is the likeliest to be off).
"""

import asyncio
import collections
import time

from django.db import connection

from messenger_realtime.exceptions import describe_error
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)

MEASURE_EVERY = 60.0  # seconds between two measurements
KEEP = 5  # measurements the offset is chosen from


def _measure() -> tuple[float, float]:
    """(the database's clock minus this process's, half the round trip), one read."""
    with connection.cursor() as cursor:
        before = time.time()
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        after = time.time()
        (database,) = cursor.fetchone()
    return float(database) - (before + after) / 2, (after - before) / 2


measure = hub_read(_measure)


class DatabaseClock:
    """The database's time as this process's event loop sees it: its own clock plus the
    measured offset (0 until the first measurement)."""

    __slots__ = ("_measurements", "_task", "offset", "uncertainty")

    def __init__(self) -> None:
        self.offset = 0.0  # the database's clock minus this process's, in seconds
        self.uncertainty: float | None = None  # None until measured
        self._measurements: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=KEEP
        )  # (half the round trip, offset)
        self._task: asyncio.Task[None] | None = None

    def now(self) -> float:
        """Unix seconds by the database's clock, as near as measured."""
        return time.time() + self.offset

    def start(self) -> None:
        """Measure now and every MEASURE_EVERY seconds from now on (once per loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._measure_forever())

    async def measure(self) -> None:
        """One measurement; the offset becomes the best of the last KEEP."""
        offset, half_round_trip = await measure()
        self._measurements.append((half_round_trip, offset))
        self.uncertainty, self.offset = min(self._measurements)
        metrics.database_clock_offset.set(self.offset)
        metrics.database_clock_uncertainty.set(self.uncertainty)

    async def _measure_forever(self) -> None:
        failing = False
        while True:
            try:
                await self.measure()
                failing = False
            except Exception as exc:  # the database away: the last offset stands
                if not failing:
                    logger.warning(
                        "hub could not measure the database clock: %s", describe_error(exc)
                    )
                failing = True
            await asyncio.sleep(MEASURE_EVERY)
