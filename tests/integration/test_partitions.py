"""The partition filter (DISPATCH_PARTITIONS > 1) against real PostgreSQL: every target
belongs to exactly one partition, a partition's walk and claims take only its own rows
(fair rows, urgent rows, suspects), and the walk is a scan of ix_rto_pending_partition."""

import hashlib
import itertools
import json
import uuid
from typing import Any

import pytest
from django.db import connection

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch import partitions, sql, store
from messenger_realtime.dispatch.lease import advisory_key
from messenger_realtime.dispatch.partitions import INT4_MIN, Partition
from messenger_realtime.dispatch.store import NO_TARGET
from tests.support.partitions import insert_invitations, insert_rows, partition_of
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
SHAPE = store.ClaimShape(200, [60.0], 0.0, 8)


def claim_all(partition: Partition | None) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(row id, target) of every row one leader of `partition` claims, claim after claim."""

    async def drain() -> list[tuple[uuid.UUID, uuid.UUID]]:
        conn = await db.connect()
        claimed, cursor = [], NO_TARGET
        try:
            while True:
                outcomes, cursor = await store.claim_fair(conn, SHAPE, cursor, partition)
                outcomes += await store.claim_suspect(conn, SHAPE, partition)
                if not outcomes:
                    return claimed
                for o in outcomes:
                    target = o.row.chat_id or o.row.target_user_id
                    claimed.append((o.row.id, target))
        finally:
            await conn.close()

    return run(drain())


def test_partitions_cover_the_hash_range_without_gaps_or_overlaps() -> None:
    for count in range(1, 65):
        slices = [Partition(index, count) for index in range(count)]
        assert slices[0].lo == INT4_MIN and slices[-1].hi == 2**31 - 1
        assert all(a.hi + 1 == b.lo for a, b in itertools.pairwise(slices))
    with pytest.raises(ValueError):
        Partition(2, 2)


def test_a_targets_partition_is_the_slice_holding_its_hash() -> None:
    keys = [uuid.uuid4() for _ in range(200)]
    with connection.cursor() as cur:
        cur.execute(f"SELECT k, {partitions.target_hash('k')} FROM unnest(%s::uuid[]) AS k", [keys])
        hashes = dict(cur.fetchall())
    for count in (2, 3, 7):
        for key in keys:
            p = Partition(partition_of(key, count), count)
            assert p.lo <= hashes[key] <= p.hi
    # md5 of the canonical text: the same value in every process and PostgreSQL version.
    key = uuid.UUID("00000000-0000-0000-0000-000000000001")
    with connection.cursor() as cur:
        cur.execute(f"SELECT {partitions.target_hash('%s::uuid')}", [key])
        (value,) = cur.fetchone()
    expected = int.from_bytes(hashlib.md5(str(key).encode()).digest()[:4], "big", signed=True)
    assert value == expected


def test_each_row_is_claimed_by_its_targets_partition_only_and_every_row_once() -> None:
    chats = [uuid.uuid4() for _ in range(60)]
    users = [uuid.uuid4() for _ in range(20)]
    insert_rows(chats, 5)
    insert_invitations(users[:10])  # urgent rows: claimed ahead of the fair walk
    insert_invitations(users[10:], suspect=True)  # suspects: claimed alone
    count = 3
    seen: dict[uuid.UUID, int] = {}
    for index in range(count):
        for row_id, target in claim_all(Partition(index, count)):
            assert row_id not in seen, "a row claimed by two partitions"
            seen[row_id] = index
            assert partition_of(target, count) == index
    assert len(seen) == 60 * 5 + 20  # every row, by some partition
    assert len(set(seen.values())) == count  # 80 targets spread over all three


async def ensure_partition_index() -> str:
    conn = await db.connect()
    try:
        return await store.ensure_partition_index(conn, advisory_key("tests#partition-index"))
    finally:
        await conn.close()


def test_a_partitioned_runner_builds_the_partition_index_only_where_missing() -> None:
    with connection.cursor() as cur:
        cur.execute("DROP INDEX IF EXISTS messenger.ix_rto_pending_partition")
    assert run(ensure_partition_index()) == "built"
    assert run(ensure_partition_index()) == "valid"
    with connection.cursor() as cur:  # as a failed CONCURRENTLY build leaves it
        cur.execute(
            "UPDATE pg_index SET indisvalid = false"
            " WHERE indexrelid = 'messenger.ix_rto_pending_partition'::regclass"
        )
    assert run(ensure_partition_index()) == "built"
    assert run(ensure_partition_index()) == "valid"


def plan(statement: str, params: dict[str, Any]) -> str:
    with connection.cursor() as cur:
        cur.execute("SET enable_seqscan = off")  # a small table: ask for the index's plan
        cur.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        (document,) = cur.fetchone()
        cur.execute("RESET enable_seqscan")
    return json.dumps(document if not isinstance(document, str) else json.loads(document))


def test_the_partition_walk_probes_its_index_by_hash_range() -> None:
    run(ensure_partition_index())  # what a partitioned runner does as it starts
    insert_rows([uuid.uuid4() for _ in range(50)], 20)
    with connection.cursor() as cur:
        cur.execute("ANALYZE messenger.realtime_outbox")
    params = {
        "after": NO_TARGET,
        "limit": 50,
        **Partition(1, 4).params(),
        "delays": [1.0],
        "jitter": 0.0,
        "max_attempts": 8,
        "exhausted": sql.EXHAUSTED_ERROR,
        **dict.fromkeys(("lease_key", "lease_pid", "lease_classid", "lease_objid")),
    }
    # One plan: the partition's walk and the fair probes of the targets it walked.
    claim = plan(sql.WALK_AND_CLAIM_IN_PARTITION, params)
    assert '"Index Name": "ix_rto_pending_partition"' in claim
    assert "Seq Scan" not in claim and "ROW(" in claim  # the cursor is an index range too
    # The fair probes of the walked targets keep using ix_rto_pending_target.
    assert '"Index Name": "ix_rto_pending_target"' in claim
