"""The real `dispatch_realtime` command as separate processes: lock, wake, crash, SIGTERM."""

import signal
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch.push import PIPELINE_CHUNK
from messenger_realtime.dispatch.sql import WALK_AND_CLAIM
from messenger_realtime.dispatch.store import NO_TARGET
from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.factories import ChatFactory, MessageFactory, OutboxEntryFactory
from tests.support.helpers import commit_message_received, receive_sync, subscribe_sync
from tests.support.runtime import PrivateRedis, wait_until
from tests.support.workers import WorkerProcess, lock_holders

pytestmark = pytest.mark.slow


@pytest.fixture
def start_worker(worker_env: dict[str, str]) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, **settings: Any) -> WorkerProcess:
        worker = WorkerProcess(env or worker_env, *args, **settings)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def state(entry: RealtimeOutboxEntry) -> tuple[str, int]:
    """The row's status and attempts as stored now."""
    entry.refresh_from_db()
    return entry.status, entry.attempts


def test_notify_wakes_an_idle_worker_long_before_the_polling_interval(
    start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    worker = start_worker(polling_interval=60)
    worker.wait_for("idle; waiting")
    message = MessageFactory()
    channel = subscribe_sync(redis_url, message.chat_id)
    commit_message_received(message)
    # Far inside the 60 s polling interval: only the NOTIFY can have woken it.
    got = receive_sync(redis_url, channel, timeout=10)
    assert got["payload"]["messageId"] == str(message.id)
    assert "reason=notify" in worker.wait_for("woke")
    entry = RealtimeOutboxEntry.objects.get(message_id=message.id)
    wait_until(lambda: state(entry) == ("Done", 1), what="Done")


def test_second_instance_skips_the_run_while_the_first_holds_the_lock(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    leader = start_worker(polling_interval=60)
    leader.wait_for("dispatching")
    holders = lock_holders()
    assert len(holders) == 1
    OutboxEntryFactory()
    second = start_worker("--once")
    assert second.wait() == 0
    assert any("dispatch lock busy; skipping run" in line for line in second.lines)
    assert lock_holders() == holders


def test_standby_takes_over_when_the_leader_dies(
    start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    leader = start_worker(polling_interval=0.2)
    leader.wait_for("dispatching")
    standby = start_worker(polling_interval=0.2)
    standby.wait_for("dispatch lock busy")
    leader.proc.kill()  # kill -9: the lock dies with its session
    standby.wait_for("dispatching", timeout=30)  # within LOCK_TTL
    chat = ChatFactory()
    channel = subscribe_sync(redis_url, chat.id)
    entry = OutboxEntryFactory(message__chat=chat)
    assert receive_sync(redis_url, channel)["payload"]["messageId"] == str(entry.message_id)


def test_leader_whose_session_is_killed_reconnects_relocks_and_catches_up(
    start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    worker = start_worker(polling_interval=60)
    worker.wait_for("idle; waiting")
    (pid,) = lock_holders()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", [pid])
    message = MessageFactory()
    channel = subscribe_sync(redis_url, message.chat_id)
    # Committed by the owner, NOTIFY and all: if the worker is back and listening it wakes
    # now; if its NOTIFY reached nobody, the catch-up pass after reconnecting finds it.
    commit_message_received(message)
    worker.wait_for("reconnecting")
    assert receive_sync(redis_url, channel)["payload"]["messageId"] == str(message.id)
    assert len(lock_holders()) == 1 and lock_holders() != [pid]


def test_crash_between_claim_and_outcome_loses_nothing(
    start_worker: Callable[..., WorkerProcess],
    worker_env: dict[str, str],
    private_redis: PrivateRedis,
) -> None:
    env = dict(worker_env, REDIS_URL=private_redis.url)
    entry = OutboxEntryFactory()
    channel = subscribe_sync(private_redis.url, entry.chat_id)
    private_redis.freeze()  # the push will hang after the claim has committed
    doomed = start_worker(env=env, backoff_base=0.5, backoff_jitter=0, publish_timeout=60)
    wait_until(lambda: state(entry) == ("Pending", 1), what="the claim to commit")
    doomed.proc.kill()  # kill -9 between claim and outcome
    doomed.proc.wait()
    assert state(entry) == ("Pending", 1)

    private_redis.thaw()
    start_worker(env=env, polling_interval=0.2)
    message = receive_sync(private_redis.url, channel)
    assert message["payload"]["messageId"] == str(entry.message_id)
    wait_until(lambda: state(entry)[0] == "Done", what="Done after the retry")
    assert state(entry) == ("Done", 2)


def test_skip_locked_never_hands_one_row_to_two_claimers(transactional_db: None) -> None:
    OutboxEntryFactory.create_batch(30)
    params: dict[str, Any] = {"after": NO_TARGET, "delays": [1.0], "jitter": 0.0}
    params.update(max_attempts=8, exhausted="x", lease_key=None, lease_pid=None)
    params.update(lease_classid=None, lease_objid=None)  # no lease: --no-lock's claim

    def claimed(conn: psycopg.Connection[Any], limit: int) -> set[Any]:
        rows = conn.execute(WALK_AND_CLAIM, {**params, "limit": limit}).fetchall()
        return {row[0] for row in rows if row[0] is not None}  # (not the walk's trailer)

    with (
        psycopg.connect(db.conninfo()) as first,
        psycopg.connect(db.conninfo(), autocommit=True) as second,
    ):
        # The first claimer's transaction stays open (its candidates locked) while the
        # second walks all 30 chats (one row each) and claims; then the first commits and
        # the second claims again (the first's rows are backing off by then).
        first_ids = claimed(first, 20)
        second_ids = claimed(second, 30)
        first.commit()
        second_ids |= claimed(second, 30)
    assert len(first_ids) == 20 and len(second_ids) == 10
    assert first_ids.isdisjoint(second_ids)


def test_two_workers_without_the_lock_claim_each_row_once(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    entries = OutboxEntryFactory.create_batch(600, message__chat=ChatFactory())
    workers = [start_worker("--once", "--no-lock", batch_size=20) for _ in range(2)]
    assert [w.wait(timeout=60) for w in workers] == [0, 0]
    attempts = RealtimeOutboxEntry.objects.filter(id__in=[e.id for e in entries])
    assert set(attempts.values_list("status", "attempts")) == {("Done", 1)}


def test_sigterm_stops_between_chunks_keeps_progress_and_releases_the_lock(
    start_worker: Callable[..., WorkerProcess],
    worker_env: dict[str, str],
    private_redis: PrivateRedis,
) -> None:
    OutboxEntryFactory.create_batch(PIPELINE_CHUNK + 20, message__chat=ChatFactory())
    private_redis.freeze()  # the first chunk's push hangs: the worker is mid-push
    worker = start_worker(env=dict(worker_env, REDIS_URL=private_redis.url), publish_timeout=60)
    worker.wait_for("batch built")  # claimed and built; the first chunk now hangs
    worker.signal(signal.SIGTERM)  # handled at the push's first await: mid-chunk
    private_redis.thaw()  # the chunk in hand completes; the next is not started
    assert worker.wait() == 0
    states = list(RealtimeOutboxEntry.objects.order_by("id").values_list("status", "attempts"))
    assert states == [("Done", 1)] * PIPELINE_CHUNK + [("Pending", 0)] * 20
    assert lock_holders() == []
    assert "Traceback" not in worker.log()
