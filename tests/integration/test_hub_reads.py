"""The hub's reads (hub/reads.py): one connection kept between reads on the sync thread,
and a read on a connection the server ended is made again on a fresh one."""

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import ProgrammingError, connection

from messenger_realtime.hub.reads import hub_read
from tests.support.runtime import run, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("hub_thread_db"),
]


@hub_read
def backend_pid(marker: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), %s::text", [marker])
        return int(cursor.fetchone()[0])


@pytest.fixture
def observer() -> Iterator[psycopg.Connection[Any]]:
    params = {**connection.get_connection_params(), "autocommit": True}
    with psycopg.connect(**params) as conn:
        yield conn


def last_statement(observer: psycopg.Connection[Any], pid: int) -> Any:
    return observer.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()


def test_reads_keep_one_connection_and_borrow_nothing_in_between(
    observer: psycopg.Connection[Any],
) -> None:
    pool = connection.pool  # type: ignore[attr-defined]
    first = run(backend_pid("first"))
    borrowed = pool.get_stats().get("requests_num", 0)
    second = run(backend_pid("second"))
    # The same backend, and nothing borrowed from the pool for the second read (each
    # borrow costs a check round trip and Django's connect()).
    assert second == first
    assert pool.get_stats().get("requests_num", 0) == borrowed
    assert last_statement(observer, first) == ("SELECT pg_backend_pid(), 'second'::text",)


def test_a_read_on_a_connection_the_server_ended_is_made_again_on_a_fresh_one(
    observer: psycopg.Connection[Any],
) -> None:
    kept = run(backend_pid("before"))
    observer.execute("SELECT pg_terminate_backend(%s)", [kept])
    wait_until(lambda: last_statement(observer, kept) is None, what="the backend to end")
    assert run(backend_pid("after")) != kept  # no error reached the caller


def test_an_error_of_the_statement_itself_is_not_read_again() -> None:
    calls: list[int] = []

    @hub_read
    def broken() -> None:
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")

    with pytest.raises(ProgrammingError):
        run(broken())
    assert calls == [1]
