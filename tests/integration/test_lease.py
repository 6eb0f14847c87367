"""The single-runner lease against real PostgreSQL: heartbeats, stale holders, take-over,
the old leader's refusal to claim or push, and the permission pg_terminate_backend needs."""

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from django.db import connection

from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.dispatch import connections as db
from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.dispatch.lease import Leader, Standby, advisory_key
from messenger_realtime.exceptions import LeadershipLost
from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.factories import OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
KEY = "job:scheduled:messenger-realtime-dispatch"
TTL = 30.0
TURN = f"{KEY}#acquire"  # the transaction lock acquisitions take turns on


async def age_lease(seconds: float) -> None:
    """Make the lease's last heartbeat `seconds` old (as if its holder stopped then)."""
    async with await db.connect() as conn:
        await conn.execute(
            "UPDATE messenger.realtime_dispatch_lease"
            " SET heartbeat_at = now() - make_interval(secs => %s)",
            (seconds,),
        )


async def lease_row() -> tuple[int, str] | None:
    async with await db.connect() as conn:
        cur = await conn.execute("SELECT holder_pid, holder FROM messenger.realtime_dispatch_lease")
        row = await cur.fetchone()
    return (row[0], row[1]) if row else None


async def leader_of(ttl: float = TTL) -> Leader:
    leader = Leader(KEY, ttl)
    await leader.connect()
    return leader


async def pid(conn: psycopg.AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT pg_backend_pid()")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def test_the_first_leader_takes_the_lock_and_names_its_session_in_the_lease() -> None:
    async def scenario() -> tuple[bool, int, tuple[int, str] | None]:
        leader = await leader_of()
        try:
            assert leader.conn is not None
            return await leader.try_acquire(), await pid(leader.conn), await lease_row()
        finally:
            await leader.close()

    acquired, backend, row = run(scenario())
    assert acquired
    assert row is not None and row[0] == backend
    assert row[1].endswith(f":{os.getpid()}")  # host:pid, for operators
    assert run(lease_row()) is None  # a graceful close gives the lease back


def test_a_standby_leaves_a_live_leader_alone() -> None:
    async def scenario() -> tuple[bool, bool]:
        first, second = await leader_of(), await leader_of()
        try:
            assert await first.try_acquire()
            await age_lease(TTL - 5)  # old, but younger than LOCK_TTL
            taken = await second.try_acquire()
            await first.ensure_held()  # still ours: no LeadershipLost
            return taken, first.holds_lock
        finally:
            await first.close()
            await second.close()

    assert run(scenario()) == (False, True)


def test_a_standby_judges_the_lease_by_its_holders_lock_ttl_not_its_own() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        holder, short = await leader_of(TTL), await leader_of(TTL / 3)  # mismatched settings
        try:
            assert await holder.try_acquire()
            await age_lease(TTL - 5)  # past the standby's LOCK_TTL, within the holder's
            taken_live = await short.try_acquire()
            await holder.ensure_held()  # still ours: no LeadershipLost
            await age_lease(TTL + 1)  # the holder went silent for longer than its own TTL
            taken_stale = await short.try_acquire()
            return taken_live, taken_stale, await _lost(holder)
        finally:
            await holder.close()
            await short.close()

    assert run(scenario()) == (False, True, True)


def test_a_lease_from_before_the_holders_ttl_was_stored_is_judged_by_the_readers_own() -> None:
    async def scenario() -> bool:
        holder, short = await leader_of(TTL), await leader_of(TTL / 3)
        try:
            assert await holder.try_acquire()
            async with await db.connect() as conn:  # as a worker before migration 0009 wrote it
                await conn.execute(
                    "UPDATE messenger.realtime_dispatch_lease SET lock_ttl = NULL,"
                    " heartbeat_at = now() - make_interval(secs => %s)",
                    (TTL / 3 + 1,),
                )
            return await short.try_acquire()
        finally:
            await holder.close()
            await short.close()

    assert run(scenario()) is True


async def _lost(leader: Leader) -> bool:
    try:
        await leader.ensure_held()
    except LeadershipLost:
        return True
    return False


def test_a_standby_ends_a_stale_leaders_session_and_the_old_leader_cannot_claim_or_push(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[bool, int, int, list[str]]:
        stale, standby = await leader_of(), await leader_of()
        try:
            assert await stale.try_acquire()
            assert stale.conn is not None and standby.conn is not None
            stale_pid = await pid(stale.conn)
            await age_lease(TTL + 1)
            with caplog.at_level(logging.WARNING, logger="messenger_realtime.dispatch.lease"):
                taken = await standby.try_acquire()
            failures = []
            for check in (stale.ensure_held, stale.ensure_fresh):  # before a claim, a push
                try:
                    await check()
                except LeadershipLost:
                    failures.append(check.__name__)
            return taken, stale_pid, await pid(standby.conn), failures
        finally:
            await stale.close()
            await standby.close()

    taken, stale_pid, standby_pid, failures = run(scenario())
    assert taken
    assert failures == ["ensure_held", "ensure_fresh"]
    (record,) = [r for r in caplog.records if "stale dispatch lease" in r.getMessage()]
    assert (record.HolderPid, record.reason) == (stale_pid, "stale heartbeat")  # type: ignore[attr-defined]
    assert record.HeartbeatAgeSeconds > TTL  # type: ignore[attr-defined]
    assert standby_pid != stale_pid


def test_a_lock_held_without_a_lease_is_ended_only_once_it_was_seen_for_lock_ttl() -> None:
    async def scenario() -> tuple[bool, bool, bool, bool]:
        manual = await db.connect()  # a person's session (or an older worker): no lease row
        standby = await leader_of()
        try:
            await manual.execute("SELECT pg_advisory_lock(%s)", (advisory_key(KEY),))
            first = await standby.try_acquire()  # starts the clock on that holder
            second = await standby.try_acquire()
            assert standby.standby.unleased is not None
            seen_pid, _ = standby.standby.unleased
            standby.standby.unleased = (seen_pid, time.monotonic() - TTL - 1)  # TTL later
            third = await standby.try_acquire()
            return first, second, third, await _is_dead(manual)
        finally:
            await standby.close()
            await manual.close()

    assert run(scenario()) == (False, False, True, True)


async def _is_dead(conn: psycopg.AsyncConnection[Any]) -> bool:
    try:
        await conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False


def test_a_busy_acquisition_turn_makes_a_worker_stand_by_at_once_instead_of_waiting() -> None:
    async def scenario() -> tuple[bool, bool]:
        leader = await leader_of()
        try:
            # Another session (a worker frozen inside its acquisition) holds the turn.
            async with await db.connect() as wedged, wedged.transaction():
                await wedged.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(TURN)])
                busy = await asyncio.wait_for(leader.try_acquire(), timeout=5)
            return busy, await leader.try_acquire()  # its next poll
        finally:
            await leader.close()

    assert run(scenario()) == (False, True)


def test_a_lease_session_frozen_inside_a_transaction_is_ended_by_the_server() -> None:
    """So a worker stopped mid-acquisition (holding the turn, or a lease row's lock in a
    take-over) cannot keep the others from leading: the server ends its session."""

    async def scenario() -> str:
        wedged, other = await leader_of(3.0), await leader_of(3.0)  # the limit: 1 s
        try:
            assert wedged.conn is not None
            await wedged.conn.execute("BEGIN")
            await wedged.conn.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(TURN)])
            deadline = time.monotonic() + 10
            while not await other.try_acquire():  # polls, as a standby does
                assert time.monotonic() < deadline, "the frozen session kept the turn"
                await asyncio.sleep(0.05)
            try:
                await wedged.try_acquire()  # it resumes: the run loop reconnects on this
            except LeadershipLost as exc:
                return str(exc)
            return "resumed as if nothing happened"
        finally:
            await wedged.close()
            await other.close()

    assert "frozen" in run(asyncio.wait_for(scenario(), timeout=20))


def test_a_pass_whose_lease_was_taken_over_claims_and_pushes_nothing() -> None:
    OutboxEntryFactory.create_batch(3)
    publisher = RecordingPublisher()

    async def scenario() -> str:
        dispatcher = Dispatcher(options(lock_ttl=TTL), publisher)
        standby = await leader_of()
        try:
            await dispatcher.leader.connect()
            assert await dispatcher.leader.try_acquire()
            await age_lease(TTL + 1)
            assert await standby.try_acquire()
            try:
                await dispatcher.run_pass()
            except LeadershipLost as exc:
                return str(exc)
            return "passed"
        finally:
            await dispatcher.close()
            await standby.close()

    assert run(scenario()) != "passed"
    assert publisher.events == []
    assert set(RealtimeOutboxEntry.objects.values_list("attempts", flat=True)) == {0}


def test_a_leader_frozen_mid_batch_and_replaced_meanwhile_pushes_no_further_row() -> None:
    OutboxEntryFactory.create_batch(3)

    class FrozenAfterFirst(RecordingPublisher):
        """After the first push, time jumps past LOCK_TTL and a standby takes over."""

        async def publish(self, event: OutgoingEvent) -> None:
            await super().publish(event)
            if len(self.events) == 1:
                await age_lease(TTL + 1)
                assert await standby.try_acquire()
                dispatcher.leader.proven_at -= TTL  # the leader's clock ran on while frozen

    publisher = FrozenAfterFirst()
    dispatcher = Dispatcher(options(lock_ttl=TTL), publisher)
    standby = Leader(KEY, TTL)

    async def scenario() -> bool:
        await standby.connect()
        try:
            await dispatcher.leader.connect()
            assert await dispatcher.leader.try_acquire()
            try:
                # Stops pushing at the next chunk, records what it pushed, and its next
                # claim (the pass's suspects, or the next pass) finds the lease gone.
                await dispatcher.run_pass()
            except LeadershipLost:
                return True
            return False
        finally:
            await dispatcher.close()
            await standby.close()

    assert run(scenario()) is True
    assert len(publisher.events) == 1  # the two rows after the take-over were not pushed
    # The pushed row's outcome is recorded; the other two keep their claim (attempt 1) and
    # go out from the new leader after the backoff.
    assert sorted(RealtimeOutboxEntry.objects.values_list("status", "attempts")) == [
        ("Done", 1),
        ("Pending", 1),
        ("Pending", 1),
    ]


def test_a_push_after_the_lease_went_unproven_for_two_thirds_of_lock_ttl_proves_it_first() -> None:
    async def scenario() -> tuple[float, float]:
        leader = await leader_of()
        try:
            assert await leader.try_acquire()
            leader.proven_at = time.monotonic() - TTL  # as after a long stop
            before = time.monotonic()
            await leader.ensure_fresh()  # a heartbeat, which still holds
            return before, leader.proven_at
        finally:
            await leader.close()

    before, proven_at = run(scenario())
    assert proven_at >= before


@pytest.fixture
def app_role() -> Iterator[str]:
    """A non-superuser LOGIN role with the worker's privileges on the lease table."""
    role = f"rt_lease_{uuid4().hex[:8]}"
    with connection.cursor() as cur:
        cur.execute(f"CREATE ROLE {role} LOGIN")
        cur.execute(f"GRANT USAGE ON SCHEMA messenger TO {role}")
        cur.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON messenger.realtime_dispatch_lease TO {role}"
        )
    yield role
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role]
        )
        cur.execute(f"DROP OWNED BY {role}")
        cur.execute(f"DROP ROLE {role}")


def test_ending_a_stale_session_needs_the_holders_role_or_pg_signal_backend(
    app_role: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def as_role(conn_user: str) -> psycopg.AsyncConnection[Any]:
        return await db.connect(user=conn_user)

    async def scenario() -> tuple[bool, bool]:
        superuser_leader = await leader_of()
        standby_conn = await as_role(app_role)
        standby = Standby(KEY, advisory_key(KEY), TTL)
        try:
            assert await superuser_leader.try_acquire()
            await age_lease(TTL + 1)
            refused = await standby.take_over_if_stale(standby_conn)  # another role's session
            await superuser_leader.close()
            same_role_leader = await as_role(app_role)
            await same_role_leader.execute("SELECT pg_advisory_lock(%s)", (advisory_key(KEY),))
            standby.unleased = None
            await standby.take_over_if_stale(standby_conn)
            standby.unleased = (standby.unleased or (0, 0.0))[0], time.monotonic() - TTL - 1
            ended = await standby.take_over_if_stale(standby_conn)
            await same_role_leader.close()
            return refused, ended
        finally:
            await superuser_leader.close()
            await standby_conn.close()

    with caplog.at_level(logging.ERROR, logger="messenger_realtime.dispatch.lease"):
        refused, ended = run(scenario())
    assert (refused, ended) == (False, True)
    assert any("pg_signal_backend" in r.getMessage() for r in caplog.records)
