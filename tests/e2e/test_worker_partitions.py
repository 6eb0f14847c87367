"""Partitioned runners with real workers (DISPATCH_PARTITIONS=2, three worker processes):
a SIGKILLed leader's partition is taken over by a standby, no row is ever claimed by two
partitions, every row ends Done, and each chat's rows are claimed in order."""

import signal
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.factories import ChatFactory, backlog
from tests.support.leaders import partition_leaders as leaders_of_partitions
from tests.support.runtime import wait_until
from tests.support.workers import WorkerProcess

pytestmark = pytest.mark.slow
LOCK_KEY = "job:scheduled:messenger-realtime-dispatch"
K = 2
POLL = 0.2

# Every claim of a row (attempts go up) with the claiming session's application_name,
# which names the partition (messenger-realtime-dispatch:p<index>), in commit order.
AUDIT = """
CREATE TABLE messenger.test_claims (
    n bigserial PRIMARY KEY, row_id uuid, chat_id uuid, seq bigint, session text);
CREATE FUNCTION messenger.test_record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO messenger.test_claims (row_id, chat_id, seq, session)
    VALUES (NEW.id, NEW.chat_id, NEW.seq, current_setting('application_name'));
    RETURN NEW;
END $$;
CREATE TRIGGER test_record_claim AFTER UPDATE ON messenger.realtime_outbox
    FOR EACH ROW WHEN (NEW.attempts > OLD.attempts) EXECUTE FUNCTION messenger.test_record_claim();
"""
DROP_AUDIT = """
DROP TRIGGER IF EXISTS test_record_claim ON messenger.realtime_outbox;
DROP FUNCTION IF EXISTS messenger.test_record_claim();
DROP TABLE IF EXISTS messenger.test_claims;
"""


@pytest.fixture
def claims_audit() -> Iterator[None]:
    with connection.cursor() as cur:
        cur.execute(AUDIT)
    yield
    with connection.cursor() as cur:
        cur.execute(DROP_AUDIT)


@pytest.fixture
def start_worker(worker_env: dict[str, str]) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        worker = WorkerProcess(
            worker_env, polling_interval=POLL, lock_ttl=3.0, dispatch_partitions=K
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def partition_leaders() -> dict[int, int]:
    """partition -> the backend pid holding its lock (exclusively), for those held."""
    return leaders_of_partitions(K, LOCK_KEY)


def leading_worker(workers: list[WorkerProcess], partition: int) -> WorkerProcess | None:
    """The one live worker whose log says it took `partition` (None until exactly one has:
    its lead line may be read a moment after its lock shows in pg_locks)."""
    owners = [
        worker
        for worker in workers
        if worker.proc.poll() is None
        and any("action=lead" in line and f"partition={partition}" in line for line in worker.lines)
    ]
    return owners[0] if len(owners) == 1 else None


def all_done() -> bool:
    return not RealtimeOutboxEntry.objects.exclude(status="Done").exists()


def commit_traffic(chats: list[Any], per_chat: int) -> None:
    for chat in chats:
        backlog(chat, per_chat)  # committed in bulk with one NOTIFY, as owners do


def test_a_killed_partition_leader_is_replaced_and_no_row_is_claimed_by_two_partitions(
    start_worker: Callable[..., WorkerProcess], claims_audit: None
) -> None:
    first = start_worker()
    wait_until(lambda: len(partition_leaders()) == K, what="one worker leading both partitions")
    standbys = [start_worker(), start_worker()]
    for worker in standbys:
        worker.wait_for("dispatch lock busy")
    workers = [first, *standbys]
    assert set(partition_leaders()) == {0, 1}
    chats = [ChatFactory() for _ in range(8)]

    # Rows in flight while the leader of both partitions dies.
    commit_traffic(chats, 40)
    first.signal(signal.SIGKILL)
    first.wait()
    wait_until(lambda: len(partition_leaders()) == K, timeout=30, what="both partitions led")
    commit_traffic(chats, 40)

    # Kill partition 0's new leader: a standby (or the other leader) takes it over,
    # while partition 1 keeps going wherever it is led.
    victim = wait_until(lambda: leading_worker(workers, 0), what="partition 0's leader")
    victim.signal(signal.SIGKILL)
    victim.wait()
    commit_traffic(chats, 40)
    wait_until(lambda: len(partition_leaders()) == K, timeout=30, what="partition 0 taken over")
    survivors = [w for w in workers if w.proc.poll() is None]
    assert len(survivors) == 1
    leaders = partition_leaders()
    commit_traffic(chats, 40)
    wait_until(all_done, timeout=60, what="every row Done")

    assert RealtimeOutboxEntry.objects.count() == len(chats) * 160
    with connection.cursor() as cur:
        cur.execute("SELECT row_id, chat_id, seq, session FROM messenger.test_claims ORDER BY n")
        claims = cur.fetchall()
    partitions_of_row: dict[Any, set[str]] = defaultdict(set)
    for row_id, _chat, _seq, session in claims:
        partitions_of_row[row_id].add(session)
    assert len(partitions_of_row) == len(chats) * 160  # every row was claimed
    assert all(len(sessions) == 1 for sessions in partitions_of_row.values())
    assert {s for sessions in partitions_of_row.values() for s in sessions} == {
        "messenger-realtime-dispatch:p0",
        "messenger-realtime-dispatch:p1",
    }
    # Per-chat order: each chat's rows, claimed once (rows in flight at a kill are
    # retried later as suspects, as with one runner), are claimed in seq order.
    claim_counts = Counter(row_id for row_id, *_ in claims)
    by_chat: dict[Any, list[int]] = defaultdict(list)
    for row_id, chat_id, seq, _session in claims:
        if claim_counts[row_id] == 1:
            by_chat[chat_id].append(seq)
    assert len(by_chat) == len(chats)
    assert all(seqs == sorted(seqs) for seqs in by_chat.values())
    assert partition_leaders() == leaders  # the survivor leads both, undisturbed
