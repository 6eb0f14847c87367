"""The backlog gauges' read stays bounded whatever the backlog: exact up to
PENDING_EXACT_UP_TO Pending rows, PostgreSQL's estimate past it, never a sequential scan
(real PostgreSQL; a backlog made with generate_series)."""

import json
import uuid
from typing import Any

import pytest
from django.db import connection

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import sql, store
from messenger_realtime.dispatch.store import PENDING_EXACT_UP_TO
from tests.support.factories import OutboxEntryFactory
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
BACKLOG = 150_000


def stats() -> tuple[int, float]:
    async def read() -> tuple[int, float]:
        conn = await db.connect()
        try:
            return await store.pending_stats(conn)
        finally:
            await conn.close()

    result: tuple[int, float] = run(read())
    return result


def backlog(rows: int, age_seconds: int = 0) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, created_at)"
            " SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup', %s,"
            " now() - make_interval(secs => %s) FROM generate_series(1, %s)",
            [uuid.uuid4(), age_seconds, rows],
        )
        cur.execute("ANALYZE messenger.realtime_outbox")


def test_a_small_backlog_is_counted_exactly_with_its_oldest_age() -> None:
    OutboxEntryFactory.create_batch(3, done=True)  # not Pending: not counted
    OutboxEntryFactory.create_batch(5)
    count, oldest = stats()
    assert count == 5 and 0 <= oldest < 60


def test_past_the_exact_bound_the_count_is_an_estimate_of_the_right_size() -> None:
    backlog(BACKLOG)
    count, _oldest = stats()
    assert count > PENDING_EXACT_UP_TO
    assert 0.5 * BACKLOG <= count <= 2 * BACKLOG


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes, todo = [], [plan]
    while todo:
        node = todo.pop()
        nodes.append(node)
        todo.extend(node.get("Plans", []))
    return nodes


def test_the_gauges_read_never_scans_the_table_and_reads_at_most_the_bound() -> None:
    backlog(BACKLOG)
    with connection.cursor() as cur:
        cur.execute("SET max_parallel_workers_per_gather = 2")
        cur.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql.PENDING_STATS.replace("%(exact_up_to)s", "%s"),
            [PENDING_EXACT_UP_TO],
        )
        (raw,) = cur.fetchone()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    nodes = plan_nodes(plan)
    scans = [n for n in nodes if n.get("Relation Name") == "realtime_outbox"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), [
        n["Node Type"] for n in nodes
    ]
    assert {n.get("Index Name") for n in scans} == {"ix_rto_pending_id"}
    assert sum(n["Actual Rows"] for n in scans) <= PENDING_EXACT_UP_TO + 2
