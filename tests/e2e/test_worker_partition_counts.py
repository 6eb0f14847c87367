"""Workers started with different DISPATCH_PARTITIONS (a rolling change of the setting)
never lead at once: the newcomer logs an error naming the setting and stands by while a
leader of the other count lives, then leads once it has stopped. Real worker processes,
the real lease table and advisory locks."""

import signal
from collections.abc import Callable, Iterator

import pytest

from messenger_realtime.dispatch.lease import advisory_key
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.factories import ChatFactory, backlog
from tests.support.leaders import UNSIGNED, exclusive_advisory_locks
from tests.support.runtime import wait_until
from tests.support.workers import WorkerProcess

pytestmark = pytest.mark.slow
LOCK_KEY = "job:scheduled:messenger-realtime-dispatch"
POLL = 0.2
REFUSAL = "DISPATCH_PARTITIONS differs from a live leader's"


@pytest.fixture
def start_worker(worker_env: dict[str, str]) -> Iterator[Callable[[int], WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(partitions: int) -> WorkerProcess:
        worker = WorkerProcess(
            worker_env, polling_interval=POLL, lock_ttl=3.0, dispatch_partitions=partitions
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def led(*counts: int) -> set[tuple[int, int]]:
    """(count, partition) of every lock held exclusively among these partition counts; a
    single runner (count 1) shows as (1, 0)."""
    keys = {
        advisory_key(Partition(i, k).lock_key(LOCK_KEY) if k > 1 else LOCK_KEY) & UNSIGNED: (k, i)
        for k in counts
        for i in range(k)
    }
    return {keys[key] for key in exclusive_advisory_locks() if key in keys}


def all_done() -> bool:
    return not RealtimeOutboxEntry.objects.exclude(status="Done").exists()


@pytest.mark.parametrize("newcomer", [3, 1])
def test_a_worker_with_another_partition_count_stands_by_until_the_leader_stops(
    start_worker: Callable[[int], WorkerProcess], newcomer: int
) -> None:
    first = start_worker(2)
    wait_until(lambda: led(2) == {(2, 0), (2, 1)}, what="the first worker leading both")
    other = start_worker(newcomer)
    for _ in range(newcomer):  # each of its runners refuses, naming the setting
        line = other.wait_for(REFUSAL)
        assert "partitions=" in line and "leader_partitions=2" in line
    assert led(2, newcomer) == {(2, 0), (2, 1)}  # the newcomer leads nothing
    chats = [ChatFactory() for _ in range(4)]
    for chat in chats:
        backlog(chat, 20)
    wait_until(all_done, timeout=30, what="the first worker's rows Done")

    first.signal(signal.SIGTERM)  # the rolling change goes on: the old leader stops
    assert first.wait() == 0
    everything = {(newcomer, i) for i in range(newcomer)}
    wait_until(lambda: led(2, newcomer) == everything, timeout=30, what="the newcomer leading")
    for chat in chats:
        backlog(chat, 20)
    wait_until(all_done, timeout=30, what="the newcomer's rows Done")
