"""A wrong DATABASE_URL is named at once: management commands fail with PostgreSQL's own
reason in seconds (no pool to time out first), and the worker names the reason on every
reconnect, or exits non-zero when retrying cannot help (the database does not exist).
Daphne's and the worker's /health/ready name the cause (and an unreachable Redis), never
the password. A REST request that finds the pool exhausted is answered 503 with
Retry-After. A single-process hub (no backplane) that finds another process dispatching
says so and stops being ready."""

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
from tests.support.api_client import http_get
from tests.support.factories import OutboxEntryFactory, UserFactory
from tests.support.hub_helpers import token_for
from tests.support.runtime import free_port, manage, wait_until
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
        line = worker.wait_for("could not connect to the database", timeout=30)
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


@pytest.mark.django_db
def test_daphne_readiness_names_each_cause_within_seconds_without_the_password() -> None:
    secret = "hunter2-not-logged"
    refused_db = url(PORT=free_port()).replace("://postgres@", f"://postgres:{secret}@")
    redis_port = free_port()
    env = dict(env_with(refused_db), REDIS_URL=f"redis://:{secret}@127.0.0.1:{redis_port}/5")
    env.pop("CHANNEL_REDIS_URLS", None)
    daphne = DaphneProcess(env)
    try:
        began = time.monotonic()
        status, text = http_get(f"{daphne.http}/health/ready", timeout=10)
        assert time.monotonic() - began < 5
        assert status == 503
        answer = json.loads(text)
        assert answer["database"] is False and answer["channelLayer"] is False
        assert "Connection refused" in answer["errors"]["database"]
        assert str(redis_port) in answer["errors"]["channelLayer"]
        line = daphne.wait_for("not ready: database unavailable", timeout=10)
        assert "Connection refused" in line
        assert secret not in text and secret not in daphne.log()
    finally:
        daphne.kill()


@pytest.mark.django_db
def test_daphne_readiness_names_a_role_that_does_not_exist() -> None:
    daphne = DaphneProcess(env_with(url(USER="no_such_role_here")))
    try:
        status, text = http_get(f"{daphne.http}/health/ready", timeout=10)
        assert status == 503
        assert 'role "no_such_role_here" does not exist' in json.loads(text)["errors"]["database"]
    finally:
        daphne.kill()


@pytest.mark.django_db
def test_the_workers_readiness_names_the_database_cause() -> None:
    port = free_port()  # (WorkerProcess turns the probes' port off; this test reads it)
    env = dict(env_with(url(PORT=free_port())), MESSENGER_REALTIME_METRICS_PORT=str(port))
    proc = subprocess.Popen(
        manage("dispatch_realtime"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        ready = f"http://127.0.0.1:{port}/health/ready"
        text = wait_until(lambda: http_get(ready)[1], timeout=30, what="the worker's probe")
        answer = json.loads(text)
        assert answer["database"] is False
        assert "Connection refused" in answer["databaseError"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.django_db(transaction=True)
def test_the_worker_names_an_unreachable_redis_in_words(worker_env: dict[str, str]) -> None:
    OutboxEntryFactory()  # a row to push
    redis_port = free_port()
    env = dict(worker_env, REDIS_URL=f"redis://127.0.0.1:{redis_port}/5")
    env.pop("CHANNEL_REDIS_URLS", None)
    worker = WorkerProcess(env)
    try:
        line = worker.wait_for("channel layer unreachable", timeout=30)
        assert f"127.0.0.1:{redis_port}" in line and "111" in line
    finally:
        worker.kill()


@pytest.mark.django_db(transaction=True)
def test_a_single_process_hub_that_finds_another_dispatching_says_so(
    worker_env: dict[str, str],
) -> None:
    env = dict(worker_env, REALTIME_BACKPLANE_ENABLED="false", LOG_LEVEL="INFO")
    first = DaphneProcess(env)
    second: DaphneProcess | None = None
    try:
        first.wait_for("dispatching", timeout=30)  # it leads
        second = DaphneProcess(env)
        line = second.wait_for("another process holds the dispatch lock", timeout=30)
        assert "REALTIME_BACKPLANE_ENABLED" in line and "ERROR" in line
        status, text = http_get(f"{second.http}/health/ready", timeout=10)
        assert status == 503
        assert "Redis backplane" in json.loads(text)["errors"]["dispatch"]
        assert http_get(f"{first.http}/health/ready", timeout=10)[0] == 200
    finally:
        first.kill()
        if second is not None:
            second.kill()


@pytest.mark.django_db(transaction=True)
def test_a_request_that_finds_every_pooled_connection_busy_gets_503_with_retry_after(
    worker_env: dict[str, str],
) -> None:
    """Under a load the pool cannot serve in DATABASE_POOL_TIMEOUT, a REST request is told
    so (503, Retry-After, the setting named) instead of a bare 500, and did nothing."""
    bob = UserFactory(name="bob")
    pool = {"DATABASE_POOL_MAX_SIZE": "2", "DATABASE_POOL_MIN_SIZE": "2"}  # the least allowed
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
        assert get()[0] == 200  # the pool's connections are made
        with psycopg.connect(conninfo()) as lock, psycopg.connect(conninfo()) as watch:
            # A request's first read (the caller's standing) waits on this lock.
            lock.execute("LOCK TABLE messenger_user IN ACCESS EXCLUSIVE MODE")
            first: list[tuple[int, str, dict[str, Any]]] = []
            holders = [threading.Thread(target=lambda: first.append(get())) for _ in range(2)]
            for holder in holders:  # each waits on the lock, holding one pooled connection
                holder.start()
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%%messenger_user%%'"
            )
            deadline = time.monotonic() + 20
            while watch.execute(waiting).fetchone() != (2,):
                watch.rollback()
                assert time.monotonic() < deadline, f"the requests never waited: {first}"
            status, retry_after, answer = get()
            assert (status, retry_after) == (503, "1")
            assert "DATABASE_POOL_TIMEOUT" in answer["error"]
            lock.rollback()
            for holder in holders:
                holder.join(timeout=30)
        assert [f[0] for f in first] == [200, 200]  # the requests that held them went on
    finally:
        daphne.kill()
