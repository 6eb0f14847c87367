"""Leases of different DISPATCH_PARTITIONS against real PostgreSQL: a live leader of
another count keeps a worker from leading (whatever its count, 1 included), a stale one
is cleared so that its holder learns it lost the lease before it pushes, a worker
acquiring while one of another count is inside its acquisition stands by (never both
lead), and a lease written before migration 0008 (no count stored) is read by its
LOCK_KEY."""

import asyncio
import logging
from typing import Any

import pytest

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch.gate import PartitionGate
from messenger_realtime.dispatch.lease import Leader
from messenger_realtime.exceptions import LeadershipLost
from tests.support.leaders import TTL, open_leader
from tests.support.runtime import await_until, run

pytestmark = pytest.mark.usefixtures("transactional_db")


async def lock_waiters(conn: Any) -> int:
    """How many sessions wait for a lock in this database (pg_locks: a state to poll)."""
    cur = await conn.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def lease_sql(statement: str) -> None:
    async with await db.connect() as conn:
        await conn.execute(statement)


@pytest.mark.parametrize(("count", "other"), [(2, 3), (3, 2), (2, 1), (1, 2)])
def test_a_live_leader_of_another_count_keeps_a_worker_from_leading(
    leaders: list[Leader], count: int, other: int, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[bool, bool]:
        assert await (await open_leader(leaders, 0, count)).try_acquire(count)
        # The last partition of `other` (free: its own LOCK_KEY) would give some chats a
        # second leader.
        refused = await (await open_leader(leaders, other - 1, other)).try_acquire(other)
        await leaders[0].close()  # the live leader stops (gives its lease back) ...
        took = await leaders[1].try_acquire(other)  # ... and the worker leads
        return refused, took

    with caplog.at_level(logging.WARNING, logger="messenger_realtime.dispatch.lease"):
        refused, took = run(scenario())
    assert (refused, took) == (False, True)
    (told,) = caplog.records
    assert "DISPATCH_PARTITIONS" in told.getMessage()
    if count > 1:  # the lease names the other count
        assert told.levelno == logging.ERROR
        assert (told.partitions, told.leader_partitions) == (other, count)  # type: ignore[attr-defined]
    else:  # a single runner leads: the guard (its shared lock) refuses first, as before
        assert told.levelno == logging.WARNING


def test_a_stale_lease_of_another_count_is_cleared_and_its_holder_loses_it(
    leaders: list[Leader],
) -> None:
    async def scenario() -> tuple[bool, bool]:
        wedged = await open_leader(leaders, 0, 2)
        assert await wedged.try_acquire(2)
        await lease_sql(
            "UPDATE messenger.realtime_dispatch_lease"
            f" SET heartbeat_at = now() - make_interval(secs => {TTL + 1})"
        )
        took = await (await open_leader(leaders, 0, 3)).try_acquire(3)
        try:
            await wedged.heartbeat()  # it resumes: its lease is gone, before any push
        except LeadershipLost:
            return took, True
        return took, False

    assert run(scenario()) == (True, True)


def test_a_lease_of_another_count_is_judged_live_by_its_holders_lock_ttl(
    leaders: list[Leader],
) -> None:
    async def scenario() -> tuple[bool, bool]:
        holder = await open_leader(leaders, 0, 2)  # LOCK_TTL 30
        assert await holder.try_acquire(2)
        await lease_sql(
            "UPDATE messenger.realtime_dispatch_lease"
            f" SET heartbeat_at = now() - make_interval(secs => {TTL - 5})"
        )
        short = await open_leader(leaders, 0, 3, ttl=TTL / 3)
        took = await short.try_acquire(3)  # its own TTL would call the lease stale
        await holder.heartbeat()  # the lease was left alone: no LeadershipLost
        return took, holder.holds_lock

    assert run(scenario()) == (False, True)


def test_two_workers_of_different_counts_acquiring_at_once_never_both_lead(
    leaders: list[Leader],
) -> None:
    async def scenario() -> tuple[bool, bool]:
        two, three = await open_leader(leaders, 0, 2), await open_leader(leaders, 0, 3)
        # Stall `two` inside its acquisition (it holds the turn, and waits at the lease
        # table before reading it), then let `three` acquire meanwhile.
        async with await db.connect() as blocker, blocker.transaction():
            await blocker.execute("LOCK TABLE messenger.realtime_dispatch_lease IN SHARE MODE")
            first = asyncio.ensure_future(two.try_acquire(2))
            await await_until(lambda: lock_waiters(blocker), what="`two` waiting at the lock")
            # It cannot find `two` absent and lead beside it: it stands by, at once.
            meanwhile = await asyncio.wait_for(three.try_acquire(3), timeout=5)
        return meanwhile, await first

    assert run(scenario()) == (False, True)


def test_a_lease_from_before_the_count_was_stored_is_read_by_its_lock_key(
    leaders: list[Leader],
) -> None:
    async def scenario() -> tuple[bool, bool]:
        gate = PartitionGate(0.0, partitions=2)
        assert await gate.acquire(0, await open_leader(leaders, 0, 2))
        await lease_sql("UPDATE messenger.realtime_dispatch_lease SET partitions = NULL")
        same = await gate.acquire(1, await open_leader(leaders, 1, 2))
        other = await (await open_leader(leaders, 0, 4)).try_acquire(4)
        return same, other

    assert run(scenario()) == (True, False)
