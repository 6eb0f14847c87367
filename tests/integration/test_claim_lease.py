"""The lease proof inside the fair claim (sql.WALK_AND_CLAIM) against real PostgreSQL: a
claim is one statement with no heartbeat before it, and a lease row that names another
session makes the claim take nothing."""

import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

from messenger_realtime.dispatch.dispatcher import Dispatcher
from messenger_realtime.exceptions import LeadershipLost
from messenger_realtime.models import RealtimeOutboxEntry
from tests.support.factories import OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")


def count_statements(conn: psycopg.AsyncConnection[Any], seen: list[str]) -> None:
    """Note the first words of every statement `conn` runs from now on."""
    execute: Callable[..., Any] = conn.execute

    async def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(" ".join(str(query).split())[:40])
        return await execute(query, *args, **kwargs)

    conn.execute = counted  # type: ignore[method-assign]


def test_a_fair_claim_is_one_statement_that_proves_the_lease_without_a_heartbeat() -> None:
    OutboxEntryFactory.create_batch(3)
    publisher = RecordingPublisher()
    lease_statements: list[str] = []
    claim_statements: list[str] = []

    async def scenario() -> tuple[int, float, float, list[str]]:
        dispatcher = Dispatcher(options(), publisher)
        try:
            await dispatcher.leader.connect()
            assert await dispatcher.leader.try_acquire()
            assert dispatcher.leader.conn is not None
            count_statements(dispatcher.leader.conn, lease_statements)
            count_statements(await dispatcher.claimer.connection(), claim_statements)
            dispatcher.wakes.last_probe = time.monotonic()  # no suspect probe in this pass
            dispatcher.leader.proven_at = float("-inf")
            before = time.monotonic()
            result = await dispatcher.run_pass()
            # (read before close(), whose RELEASE runs on the lease connection)
            return result.dispatched, before, dispatcher.leader.proven_at, list(lease_statements)
        finally:
            await dispatcher.close()

    dispatched, before, proven_at, during_pass = run(scenario())
    assert dispatched == 3 and len(publisher.events) == 3
    assert during_pass == []  # no heartbeat: the claim itself proved the lease
    assert len(claim_statements) == 1  # the walk and the claim in one round trip
    assert proven_at >= before  # so the pushes needed no heartbeat either


LeaseBreaker = Callable[[Dispatcher, psycopg.AsyncConnection[Any]], Awaitable[None]]


def pass_after(break_lease: LeaseBreaker) -> tuple[str, RecordingPublisher]:
    """A leader's pass over 3 rows after `break_lease` (given the dispatcher and another
    session): what the pass raised ("passed" if nothing), and what it pushed."""
    OutboxEntryFactory.create_batch(3)
    publisher = RecordingPublisher()

    async def scenario() -> str:
        dispatcher = Dispatcher(options(), publisher)
        try:
            await dispatcher.leader.connect()
            assert await dispatcher.leader.try_acquire()
            await break_lease(dispatcher, await dispatcher._work_connection())
            try:
                await dispatcher.run_pass()
            except LeadershipLost as exc:
                return str(exc)
            return "passed"
        finally:
            await dispatcher.close()

    return run(scenario()), publisher


async def rewrite_lease_row(_: Dispatcher, other: psycopg.AsyncConnection[Any]) -> None:
    # A take-over rewrites the lease row in the commit that takes the lock; the old
    # leader's session may still be up (its end is asynchronous).
    await other.execute("UPDATE messenger.realtime_dispatch_lease SET holder_pid = holder_pid + 1")


async def end_lease_session(dispatcher: Dispatcher, other: psycopg.AsyncConnection[Any]) -> None:
    # Killed, or a network cut, and nobody leads yet: the lease row still names the
    # session, but its advisory lock died with it.
    assert dispatcher.leader.conn is not None
    pid = dispatcher.leader.conn.info.backend_pid
    await other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


@pytest.mark.parametrize("break_lease", [rewrite_lease_row, end_lease_session])
def test_a_claim_after_the_lease_was_lost_claims_nothing(break_lease: LeaseBreaker) -> None:
    raised, publisher = pass_after(break_lease)
    assert "no longer this session's" in raised
    assert publisher.events == []
    assert set(RealtimeOutboxEntry.objects.values_list("attempts", flat=True)) == {0}
