"""The claim session's plans are index probes whatever the statistics say (sql.CLAIM_SESSION).

Planned while the outbox was small (a new deployment, a quiet spell), the walk's probes
were sequential scans, and the session kept that plan (a prepared statement's generic
plan) while the heap filled with Done rows: 14.6 ms of PostgreSQL per claim at 200 msg/s.
"""

import uuid
from typing import Any

import psycopg
import pytest

from messenger_realtime.dispatch import sql
from messenger_realtime.dispatch.connections import conninfo
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.dispatch.store import NO_TARGET
from tests.support.plans import outbox_scans, walk_probes

pytestmark = pytest.mark.usefixtures("transactional_db")

FILL = """
INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, seq, status)
SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup',
       (%(chats)s::uuid[])[1 + g %% cardinality(%(chats)s::uuid[])], g,
       CASE WHEN g %% 10 = 0 THEN 'Pending' ELSE 'Done' END
FROM generate_series(1, %(rows)s) AS g
"""

PARAMS: dict[str, Any] = {
    "after": NO_TARGET,
    "limit": 200,
    "delays": [1.0],
    "jitter": 0.0,
    "max_attempts": 8,
    "exhausted": sql.EXHAUSTED_ERROR,
    **dict.fromkeys(("lease_key", "lease_pid", "lease_classid", "lease_objid")),
    **Partition(1, 4).params(),
}


STATEMENTS = {
    "WALK_AND_CLAIM": sql.WALK_AND_CLAIM,
    "CLAIM_SUSPECT": sql.CLAIM_SUSPECT,
    "WALK_AND_CLAIM_IN_PARTITION": sql.WALK_AND_CLAIM_IN_PARTITION,
    "CLAIM_SUSPECT_IN_PARTITION": sql.CLAIM_SUSPECT_IN_PARTITION,
}


def assert_index_probes_only(conn: psycopg.Connection[Any]) -> None:
    for name, statement in STATEMENTS.items():
        scans = outbox_scans(conn, statement, PARAMS)
        assert scans and "Seq Scan" not in scans, (name, scans)


def test_the_claims_stay_index_probes_on_a_small_table_and_a_filled_one() -> None:
    chats = {"chats": [uuid.uuid4() for _ in range(50)]}
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(FILL, {**chats, "rows": 200})
        conn.execute("ANALYZE messenger.realtime_outbox")
        # The premise: left to the statistics, the walk reads the heap from end to end.
        assert "Seq Scan" in outbox_scans(conn, sql.WALK_AND_CLAIM, PARAMS)
        conn.execute(sql.CLAIM_SESSION)  # what the worker's claim session runs first
        assert_index_probes_only(conn)
        conn.execute(FILL, {**chats, "rows": 200_000})  # a day's table, not analysed yet
        assert_index_probes_only(conn)
        conn.execute("ANALYZE messenger.realtime_outbox")
        assert_index_probes_only(conn)


def test_the_walk_steps_to_each_target_with_one_probe() -> None:
    # The step's next key was written once but planned as a subplan per use (the key,
    # the wrap test, the cursor test each re-ran the probe): 485 index descents to walk
    # these 121 targets, a fifth of the claim's time in a backlog of many chats.
    chats = {"chats": [uuid.uuid4() for _ in range(121)]}  # every one gets Pending rows
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(FILL, {**chats, "rows": 12_100})
        conn.execute("ANALYZE messenger.realtime_outbox")
        conn.execute(sql.CLAIM_SESSION)
        probes = walk_probes(conn, sql.WALK_AND_CLAIM, PARAMS)
        claimed = conn.execute(
            "SELECT count(DISTINCT chat_id) FROM messenger.realtime_outbox"
            " WHERE claimed_at IS NOT NULL"
        ).fetchone()
    assert claimed == (121,)  # every chat walked, and claimed from
    # 120 steps after the first target, one probe each (the last one wraps round), plus
    # the first target's own probes (after the cursor, then from the start): 123.
    assert 121 <= probes <= 124, probes
