"""A wrong DATABASE_URL is named at once: management commands fail with PostgreSQL's own
reason in seconds (no pool to time out first), and the worker names the reason on every
reconnect, or exits non-zero when retrying cannot help (the database does not exist). A
REST request that finds the pool exhausted is answered 503 with Retry-After."""

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg
import pytest
from django.db import connection

from messenger_realtime.dispatch.connections import conninfo
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.runtime import free_port, manage
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = pytest.mark.slow


def env_with(database_url: str) -> dict[str, str]:
    return dict(os.environ, DATABASE_URL=database_url, MESSENGER_REALTIME_METRICS_PORT="0")


def url(**parts: Any) -> str:
    db = {**connection.settings_dict, **parts}
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.mark.django_db
def test_migrate_with_a_refused_port_says_so_within_seconds() -> None:
    began = time.monotonic()
    proc = subprocess.run(
        manage("migrate", "--noinput"),
        env=env_with(url(PORT=free_port())),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert time.monotonic() - began < 5 + 5  # the cause at once, plus Django's start-up
    assert "Connection refused" in proc.stderr
    assert "couldn't get a connection" not in proc.stderr  # no pool time-out in front


@pytest.mark.django_db
def test_the_worker_names_the_reason_on_every_reconnect() -> None:
    worker = WorkerProcess(env_with(url(PORT=free_port())))
    try:
        line = worker.wait_for("reconnecting", timeout=30)
        assert "Connection refused" in line
    finally:
        worker.kill()


@pytest.mark.django_db
def test_the_worker_exits_non_zero_naming_a_database_that_does_not_exist() -> None:
    worker = WorkerProcess(env_with(url(NAME="no_such_database_here")))
    try:
        worker.wait_for('database "no_such_database_here" does not exist', timeout=60)
        assert worker.proc.wait(timeout=30) != 0
    finally:
        worker.kill()


@pytest.mark.django_db(transaction=True)
def test_a_request_that_finds_every_pooled_connection_busy_gets_503_with_retry_after(
    worker_env: dict[str, str],
) -> None:
    """Under a load the pool cannot serve in DATABASE_POOL_TIMEOUT, a REST request is told
    so (503, Retry-After, the setting named) instead of a bare 500, and did nothing."""
    bob = UserFactory(name="bob")
    pool = {"DATABASE_POOL_MAX_SIZE": "1", "DATABASE_POOL_MIN_SIZE": "1"}
    daphne = DaphneProcess({**worker_env, **pool, "DATABASE_POOL_TIMEOUT": "0.5"})
    api = f"{daphne.http}/api/chats"

    def get() -> tuple[int, str, dict[str, Any]]:
        request = urllib.request.Request(api, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, "", json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Retry-After", ""), json.loads(error.read())

    token = token_for(bob.id)
    try:
        assert get()[0] == 200  # the pool's one connection is made
        with psycopg.connect(conninfo()) as lock, psycopg.connect(conninfo()) as watch:
            # The request's first read (the caller's standing) waits on this lock.
            lock.execute("LOCK TABLE messenger_user IN ACCESS EXCLUSIVE MODE")
            first: list[tuple[int, str, dict[str, Any]]] = []
            holder = threading.Thread(target=lambda: first.append(get()))
            holder.start()  # it waits on the lock, holding the pool's only connection
            waiting = (
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%%messenger_user%%'"
            )
            deadline = time.monotonic() + 20
            while watch.execute(waiting).fetchone() is None:
                watch.rollback()
                assert time.monotonic() < deadline, f"the first request never waited: {first}"
            status, retry_after, answer = get()
            assert (status, retry_after) == (503, "1")
            assert "DATABASE_POOL_TIMEOUT" in answer["error"]
            lock.rollback()
            holder.join(timeout=30)
        assert first[0][0] == 200  # the request that held the connection went on
    finally:
        daphne.kill()
