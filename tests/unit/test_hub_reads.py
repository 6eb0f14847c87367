"""The hub's database reads (hub/reads.py) run on threads of their own, several at once:
on asgiref's one sync thread a connect's reads queued behind every other's."""

import asyncio
import threading

from django.conf import settings

from messenger_realtime.hub import reads
from tests.support.runtime import run


def test_reads_run_side_by_side_on_the_hubs_read_threads() -> None:
    barrier = threading.Barrier(2, timeout=10)  # both must be running for either to pass

    def meet() -> str:
        barrier.wait()
        return threading.current_thread().name

    async def both() -> list[str]:
        return list(await asyncio.gather(reads.read(meet)(), reads.read(meet)()))

    names = run(both())
    assert names[0] != names[1]
    assert all(name.startswith("hub-read") for name in names), names


def test_the_read_threads_leave_half_the_pool_to_the_processs_requests() -> None:
    pool = settings.DATABASES["default"]["OPTIONS"]["pool"]
    assert reads.threads() == max(1, pool["max_size"] // 2) >= 1
    assert reads.executor()._max_workers == reads.threads()  # type: ignore[attr-defined]
