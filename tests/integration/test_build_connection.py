"""The build thread's Django connection is health-checked once a second, not once a batch,
and always after a failed read: a connection that broke in between costs one failed read
(its rows retried alone at once), then it is replaced (real PostgreSQL)."""

import asyncio
from typing import Any

import pytest
from django.db import connection

from messenger_realtime.dispatch.dispatcher import Dispatcher
from tests.support.factories import OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")


def backend_pid() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def end_session_and_add_rows(pid: int) -> None:
    with connection.cursor() as cur:  # the server ends the build thread's session
        cur.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    OutboxEntryFactory.create_batch(2)
    connection.close()  # this helper thread's own session


def test_a_broken_build_connection_costs_one_failed_read_then_is_replaced() -> None:
    OutboxEntryFactory()

    async def scenario() -> tuple[Any, Any, int, int]:
        dispatcher = Dispatcher(options(), RecordingPublisher(), use_lock=False)
        try:
            first = await dispatcher.run_pass()  # the first read checks the connection
            build_pid = await dispatcher.builder._thread.run(backend_pid)
            await asyncio.to_thread(end_session_and_add_rows, build_pid)
            second = await dispatcher.run_pass()
            new_pid = await dispatcher.builder._thread.run(backend_pid)
            return first, second, build_pid, new_pid
        finally:
            await dispatcher.close()

    first, second, old_pid, new_pid = run(scenario())
    assert first.dispatched == 1
    # The batch's read failed on the dead session (no check within the second): both rows
    # were retried alone at once, in the same pass, on a checked, fresh connection.
    assert (second.retried, second.dispatched) == (2, 2)
    assert new_pid != old_pid
