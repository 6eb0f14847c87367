"""Partition leadership against real PostgreSQL: the spreading rule, the guard between a
single runner and partition leaders, a partition's Dispatcher pushing only its rows, and
the pg_locks reading the end-to-end tests find partition leaders with."""

import uuid

import psycopg
import pytest

from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.dispatch.gate import PartitionGate
from messenger_realtime.dispatch.lease import Leader, advisory_key
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.dispatch.runner import PartitionedRunner, build_runner
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.ops.health import LivenessGroup
from tests.support.helpers import RecordingPublisher, options
from tests.support.leaders import LOCK_KEY, open_leader, partition_leaders
from tests.support.partitions import insert_rows, partition_of
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")


def test_a_process_leading_a_partition_leaves_a_free_one_to_a_process_leading_none(
    leaders: list[Leader],
) -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        busy, idle = PartitionGate(60.0, partitions=2), PartitionGate(60.0, partitions=2)
        assert await busy.acquire(0, await open_leader(leaders, 0, 2))
        # The busy process sees partition 1 free, but waits (it leads one already) ...
        busy_took = await busy.acquire(1, await open_leader(leaders, 1, 2))
        # ... so the process leading nothing takes it at once.
        idle_took = await idle.acquire(1, await open_leader(leaders, 1, 2))
        busy_again = await busy.acquire(1, leaders[1])
        return busy_took, idle_took, busy_again

    assert run(scenario()) == (False, True, False)


def test_a_worker_alone_leads_every_partition(leaders: list[Leader]) -> None:
    async def scenario() -> set[int]:
        gate = PartitionGate(0.0, partitions=3)  # no wait: the free partition is its own
        for index in range(3):
            assert await gate.acquire(index, await open_leader(leaders, index, 3))
        return gate.led

    assert run(scenario()) == {0, 1, 2}


def test_a_single_runner_and_partition_leaders_never_lead_at_once(
    leaders: list[Leader],
) -> None:
    async def scenario() -> tuple[bool, bool, bool, bool]:
        single = await open_leader(leaders, 0, 1)
        assert await single.try_acquire()
        blocked = await (await open_leader(leaders, 0, 2)).try_acquire()
        await single.close()
        took = await leaders[1].try_acquire()  # the single runner went: partitions lead
        second = await open_leader(leaders, 0, 1)
        single_took = await second.try_acquire()
        await leaders[1].heartbeat()  # a single runner never ends a partition's session
        return blocked, took, single_took, leaders[1].holds_lock

    assert run(scenario()) == (False, True, False, True)


def test_a_partitions_dispatcher_pushes_only_its_own_rows() -> None:
    chats = [uuid.uuid4() for _ in range(30)]
    insert_rows(chats, 1)
    mine = {chat for chat in chats if partition_of(chat, 2) == 0}
    publisher = RecordingPublisher()

    async def one_pass() -> int:
        dispatcher = Dispatcher(options(), publisher, use_lock=False, partition=Partition(0, 2))
        try:
            return (await dispatcher.run_pass()).batches
        finally:
            await dispatcher.close()

    run(one_pass())
    # The rows reference no domain message (the build decides them); what matters is
    # which rows the partition claimed at all.
    claimed = set(
        RealtimeOutboxEntry.objects.filter(attempts__gt=0).values_list("chat_id", flat=True)
    )
    assert claimed == mine and 0 < len(mine) < len(chats)


def test_the_runner_is_partitioned_only_when_asked_and_reports_the_partitions_it_leads() -> None:
    assert isinstance(build_runner(options(), RecordingPublisher()), Dispatcher)
    two = options(dispatch_partitions=2)
    assert isinstance(build_runner(two, RecordingPublisher(), use_lock=False), Dispatcher)
    runner = build_runner(two, RecordingPublisher())
    assert isinstance(runner, PartitionedRunner) and isinstance(runner.liveness, LivenessGroup)
    runner.gate.led.add(1)
    runner.dispatchers[1].liveness.leading = True
    details = runner.liveness.state()[2]
    assert details["partitionsLed"] == [1] and details["leading"] is True


def test_the_partition_leaders_helper_finds_a_lock_whose_key_is_negative() -> None:
    """pg_locks shows a bigint key as two unsigned 32-bit halves (classid, objid)."""
    keys = [advisory_key(Partition(i, 3).lock_key(LOCK_KEY)) for i in range(3)]
    assert keys[0] < 0 < keys[1]  # K=3: partition 0's key is negative, partition 1's not
    with psycopg.connect(db.conninfo(), autocommit=True) as holder:
        for key in keys[:2]:
            holder.execute("SELECT pg_advisory_lock(%s)", [key])
        pid = holder.info.backend_pid
        assert partition_leaders(3) == {0: pid, 1: pid}
