"""A wrong DATABASE_URL is named at once: management commands fail with PostgreSQL's own
reason in seconds (no pool to time out first), and the worker names the reason on every
reconnect, or exits non-zero when retrying cannot help (the database does not exist)."""

import os
import subprocess
import time
from typing import Any

import pytest
from django.db import connection

from tests.support.runtime import free_port, manage
from tests.support.workers import WorkerProcess

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
