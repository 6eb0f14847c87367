"""Shared fixtures: real PostgreSQL (pytest-django's test database) and real Redis."""

import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection

from tests.support.runtime import PrivateRedis, free_port, wait_until

# The support modules whose fixtures tests use by name (hub_thread_db, leaders, browser):
# registered once here, instead of imported where used for their side effect.
pytest_plugins = ["tests.support.inprocess", "tests.support.leaders", "tests.support.browser"]


def start_private_redis() -> PrivateRedis:
    """A redis-server of the test's own on a free port, without persistence; answering."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is required (scripts/test installs it on a fresh machine)")
    port = free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly"]
    argv += ["no", "--daemonize", "no"]
    server = PrivateRedis(port, subprocess.Popen(argv, stdout=subprocess.DEVNULL), argv)

    def answers() -> bool:
        try:
            return bool(server.client().ping())
        except redis.ConnectionError:
            return False

    try:
        wait_until(answers, what="private redis-server")
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = start_private_redis()
    yield server
    server.stop()


@pytest.fixture
def redis_shards() -> Iterator[list[PrivateRedis]]:
    """Two private redis-servers: the channel layer's shards (CHANNEL_REDIS_URLS)."""
    servers: list[PrivateRedis] = []
    try:
        servers.append(start_private_redis())
        servers.append(start_private_redis())
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def redis_url() -> str:
    return str(settings.REDIS_URL)


@pytest.fixture
def dead_redis_url() -> str:
    """A Redis URL where nothing listens (a free loopback port)."""
    return f"redis://127.0.0.1:{free_port()}/0"


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


@pytest.fixture(autouse=True)
def _clean_outbox_for_transactional_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Start and end transactional tests with an empty outbox and no dispatch lease.

    Django's flush only truncates tables it can see on the search_path, and the outbox
    lives in the messenger schema, so committed rows would otherwise leak between tests
    (into a later test that counts rows in its own transaction, too).
    Tests without the database (the unit tier) never touch it.
    """
    if "transactional_db" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("django_db_setup")
    blocker: Any = request.getfixturevalue("django_db_blocker")
    with blocker.unblock(), connection.cursor() as cur:
        cur.execute("TRUNCATE messenger.realtime_outbox, messenger.realtime_dispatch_lease")
    yield
    with blocker.unblock(), connection.cursor() as cur:
        cur.execute("TRUNCATE messenger.realtime_outbox, messenger.realtime_dispatch_lease")
