"""The lock lease with real workers: a wedged leader (SIGSTOP) loses the lease to a standby
within LOCK_TTL, and once resumed (SIGCONT) it never claims or pushes again."""

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.factories import ChatFactory, MessageFactory
from tests.support.helpers import commit_message_received, layer, receive, subscribe
from tests.support.workers import WorkerProcess, lock_holders

pytestmark = pytest.mark.slow
TTL = 3.0  # LOCK_TTL for these workers: a heartbeat every second
POLL = 0.2


@pytest.fixture
def start_worker(worker_env: dict[str, str]) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(**settings: Any) -> WorkerProcess:
        worker = WorkerProcess(worker_env, polling_interval=POLL, lock_ttl=TTL, **settings)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.signal(signal.SIGCONT)  # a stopped process cannot be waited for otherwise
        worker.kill()


async def collect(url: str, channel: str, count: int, timeout: float) -> list[Any]:
    """The first `count` events on `channel`, each within `timeout`."""
    reader = layer(url)
    return [await receive(reader, channel, timeout) for _ in range(count)]


async def leftovers(url: str, channel: str) -> int:
    """Events still queued on `channel` (called once the workers have settled)."""
    reader = layer(url)
    count = 0
    while True:
        try:
            await receive(reader, channel, timeout=0.5)
        except TimeoutError:
            return count
        count += 1


def test_standby_takes_over_a_wedged_leader_and_the_resumed_leader_never_claims_again(
    start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    leader = start_worker()
    leader.wait_for("idle; waiting")
    standby = start_worker()
    standby.wait_for("dispatch lock busy")
    (wedged_pid,) = lock_holders()
    chat = ChatFactory()
    channel = asyncio.run(subscribe(layer(redis_url), chat.id))

    leader.signal(signal.SIGSTOP)  # alive, connected, lock held: only the lease can tell
    stopped = time.monotonic()
    messages = [MessageFactory(chat=chat) for _ in range(5)]
    for message in messages:
        commit_message_received(message)
    got = asyncio.run(collect(redis_url, channel, 5, timeout=TTL + 10))
    delivered_after = time.monotonic() - stopped
    assert sorted(e["payload"]["seq"] for e in got) == sorted(m.seq for m in messages)
    # The last heartbeat is at most TTL/3 old at the stop: the standby sees it older than
    # TTL within TTL, takes over at its next poll and pushes in its first pass (slack: a
    # loaded two-core machine).
    assert delivered_after < TTL + 4 * POLL + 2.0
    standby.wait_for("stale dispatch lease")
    (new_pid,) = lock_holders()
    assert new_pid != wedged_pid

    resumed_at = len(leader.lines)
    leader.signal(signal.SIGCONT)
    leader.wait_for("reconnecting")
    leader.wait_for("dispatch lock busy")  # back as a standby
    assert lock_holders() == [new_pid]
    rows = RealtimeOutboxEntry.objects.filter(chat_id=chat.id)
    # One claim each (a second claim would have been a second push), all Done.
    assert sorted(rows.values_list("status", "attempts")) == [("Done", 1)] * 5
    assert asyncio.run(leftovers(redis_url, channel)) == 0  # nothing pushed twice
    assert not [line for line in leader.lines[resumed_at:] if "batch claimed" in line]
