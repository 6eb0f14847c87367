"""Shared fixtures: real PostgreSQL (pytest-django's test database) and real Redis."""

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll a condition with a deadline (synchronisation on state, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class PrivateRedis:
    """A redis-server of the test's own, so a test may pause or stop it."""

    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.process = process
        self.url = f"redis://127.0.0.1:{port}/0"

    def client(self) -> "redis.Redis[bytes]":
        return redis.Redis(host="127.0.0.1", port=self.port)

    def freeze(self) -> None:
        """Stop the server process: connections stay open, every command hangs."""
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is required (scripts/test installs it on a fresh machine)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    server = PrivateRedis(port, process)

    def answers() -> bool:
        try:
            return bool(server.client().ping())
        except redis.ConnectionError:
            return False

    wait_until(answers, what="private redis-server")
    yield server
    process.kill()
    process.wait()


@pytest.fixture
def redis_url() -> str:
    return str(settings.REDIS_URL)


@pytest.fixture(scope="session")
def live_env(django_db_setup: None) -> dict[str, str]:
    """Environment for subprocesses (workers, Daphne) on the test database and Redis."""
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"postgres://{auth}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=str(settings.REDIS_URL),
        DJANGO_SETTINGS_MODULE="project.settings",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def worker_env(transactional_db: None, live_env: dict[str, str]) -> dict[str, str]:
    """live_env for a test whose subprocesses must see the rows it commits."""
    return dict(live_env)


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


@pytest.fixture(autouse=True)
def _clean_outbox_for_transactional_tests(
    request: pytest.FixtureRequest, django_db_setup: None, django_db_blocker: Any
) -> None:
    """Start transactional tests with an empty outbox.

    Django's flush only truncates tables it can see on the search_path, and the outbox
    lives in the messenger schema, so committed rows would otherwise leak between tests.
    """
    if "transactional_db" not in request.fixturenames:
        return
    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute("TRUNCATE messenger.realtime_outbox")
