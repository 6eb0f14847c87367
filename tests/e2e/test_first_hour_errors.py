"""Errors that mislead a newcomer (issue 46), each against real processes: a dependency
made unreachable through a TcpProxy that is cut (or a port where nothing listens), never
by stopping the machine's PostgreSQL or Redis."""

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection

from messenger_realtime.outbox.enums import RealtimeOutboxStatus
from tests.support.api_client import http_get
from tests.support.factories import OutboxEntryFactory, UserFactory
from tests.support.hub_clients import HubClient
from tests.support.hub_helpers import token_for
from tests.support.proxy import TcpProxy
from tests.support.runtime import free_port, manage, wait_until
from tests.support.wire import negotiate
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_proxy() -> Iterator[tuple[TcpProxy, str]]:
    """A proxy in front of the machine's Redis, and the Redis URL through it."""
    parts = urlsplit(str(settings.REDIS_URL))
    proxy = TcpProxy(parts.port or 6379)
    yield proxy, f"redis://127.0.0.1:{proxy.port}{parts.path}"
    proxy.close()


def through(env: dict[str, str], redis_url: str) -> dict[str, str]:
    env = dict(env, REDIS_URL=redis_url)
    env.pop("CHANNEL_REDIS_URLS", None)
    return env


@pytest.mark.django_db(transaction=True)
def test_negotiate_without_the_channel_layers_redis_answers_503_naming_it_once(
    worker_env: dict[str, str], redis_proxy: tuple[TcpProxy, str]
) -> None:
    """Before: 200, then the official client's "sticky sessions" error and a traceback
    per request in Daphne's log."""
    proxy, redis_url = redis_proxy
    bob = UserFactory(name="bob")
    env = through(worker_env, redis_url)
    daphne = DaphneProcess(env)
    client: HubClient | None = None
    try:
        token = token_for(bob.id)
        assert negotiate(daphne, token)[0] == 200  # Redis answers
        proxy.cut()
        client = HubClient("@microsoft/signalr", f"{daphne.http}/hubs/messenger", token, env)
        failed = client.next("state", "failed", timeout=30)
        assert "sticky" not in failed["error"] and "503" in failed["error"], (failed, daphne.log())
        for _ in range(10):
            status, body, headers = negotiate(daphne, token)
            assert status == 503, body
            assert int(headers["Retry-After"]) >= 1
            assert "channel layer (Redis)" in body["error"]
            assert str(proxy.port) not in body["error"]  # internal hosts: the log only
        daphne.wait_for("channel layer unavailable", timeout=10)
        proxy.restore()
        wait_until(lambda: negotiate(daphne, token)[0] == 200, what="negotiate back to 200")
        daphne.wait_for("channel layer reachable again", timeout=10)
        log = daphne.log()
        assert "Traceback" not in log, log
        assert log.count("channel layer unavailable") == 1, log
    finally:
        if client is not None:
            client.kill()
        daphne.kill()


@pytest.mark.django_db(transaction=True)
def test_the_workers_readiness_fails_while_pushes_fail_and_recovers_after(
    worker_env: dict[str, str], redis_proxy: tuple[TcpProxy, str]
) -> None:
    """Before: every push failed and /health/ready still said ok."""
    proxy, redis_url = redis_proxy
    port = free_port()
    env = dict(
        through(worker_env, redis_url),
        MESSENGER_REALTIME_METRICS_PORT=str(port),
        MESSENGER_REALTIME_POLLING_INTERVAL="0.5",
        MESSENGER_REALTIME_BACKOFF_BASE="0.2",
        MESSENGER_REALTIME_BACKOFF_CAP="0.5",
        MESSENGER_REALTIME_PUBLISH_TIMEOUT="1",
        MESSENGER_REALTIME_MAX_ATTEMPTS="1000",  # retried until Redis is back
        LOG_LEVEL="INFO",
    )
    proc = subprocess.Popen(
        manage("dispatch_realtime"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    ready = f"http://127.0.0.1:{port}/health/ready"
    try:
        wait_until(lambda: http_get(ready)[0] == 200, timeout=30, what="the worker ready")
        proxy.cut()
        entry = OutboxEntryFactory()  # a row to push, whose pushes fail

        def refused() -> dict[str, Any] | None:
            status, text = http_get(ready)
            return json.loads(text) if status == 503 else None

        answer = wait_until(refused, timeout=30, what="the worker not ready")
        assert answer["channelLayer"] is False
        assert "Connection" in answer["channelLayerError"], answer  # redis-py's words
        proxy.restore()
        wait_until(lambda: http_get(ready)[0] == 200, timeout=30, what="the worker ready again")

        def done() -> bool:  # a push passed (that made it ready); its outcome commits next
            entry.refresh_from_db()
            return bool(entry.status == RealtimeOutboxStatus.DONE)

        wait_until(done, timeout=10, what="the row delivered")
    finally:
        proc.kill()
        proc.wait()


def database_url(port: int) -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{port}/{db['NAME']}"


@pytest.mark.django_db
def test_a_worker_that_never_reached_the_database_does_not_say_it_lost_its_lease() -> None:
    """Before: `dispatcher lost its lease or database session; reconnecting`."""
    env = dict(os.environ, DATABASE_URL=database_url(free_port()))
    worker = WorkerProcess(env)
    try:
        line = worker.wait_for("could not connect to the database", timeout=30)
        assert "Connection refused" in line
        worker.wait_for("could not connect to the database", timeout=30)  # it retries
        assert "lost" not in worker.log()
    finally:
        worker.kill()


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_loses_its_database_session_while_leading_says_so(
    worker_env: dict[str, str],
) -> None:
    proxy = TcpProxy(int(connection.settings_dict["PORT"] or 5432))
    worker = WorkerProcess(dict(worker_env, DATABASE_URL=database_url(proxy.port)))
    try:
        worker.wait_for("dispatching", timeout=30)
        proxy.cut()
        line = worker.wait_for("lost its (lease|database session)", timeout=30)
        assert "leading" in line or "lease" in line
        worker.wait_for("could not connect to the database", timeout=30)
    finally:
        worker.kill()
        proxy.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_worker_says_why_it_stopped_on_a_signal(worker_env: dict[str, str], sig: int) -> None:
    """Before: nothing was logged when it stopped."""
    worker = WorkerProcess(worker_env)
    try:
        worker.wait_for("dispatching", timeout=30)
        worker.signal(sig)
        assert worker.wait() == 0
        line = worker.wait_for("worker stopped", timeout=10)
        assert signal.Signals(sig).name in line
    finally:
        worker.kill()


@pytest.mark.django_db
def test_the_worker_says_why_it_stopped_on_a_fatal_error() -> None:
    db = connection.settings_dict
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/no_such_database_here",
    )
    worker = WorkerProcess(env)
    try:
        assert worker.wait(timeout=60) == 1
        line = worker.wait_for("worker stopped", timeout=10)
        assert "ERROR" in line and "no_such_database_here" in line
    finally:
        worker.kill()


@pytest.mark.django_db(transaction=True)
def test_the_worker_says_why_it_stopped_after_once(worker_env: dict[str, str]) -> None:
    worker = WorkerProcess(worker_env, "--once")
    try:
        assert worker.wait() == 0
        assert "--once" in worker.wait_for("worker stopped", timeout=10)
    finally:
        worker.kill()
