"""Shared fixtures: real PostgreSQL (pytest-django's test database) and real Redis."""

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.support.runtime import (
    PrivateRedis,
    free_port,
    private_redis_servers,
    start_private_redis,
)
from tests.support.shared import OWN, SHARED, SharedProcesses

# The support modules whose fixtures tests use by name (hub_thread_db, leaders, browser):
# registered once here, instead of imported where used for their side effect.
pytest_plugins = ["tests.support.inprocess", "tests.support.leaders", "tests.support.browser"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Within each module, the tests marked own_processes run right after the module's
    others, so that the processes the others share start once (tests/support/shared.py).
    Everything else keeps its place: pytest-django has already put the tests that use
    the database in the order it needs (transactional ones after the others)."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    own: dict[str, list[pytest.Item]] = {}
    rest: list[pytest.Item] = []
    for item in items:
        if item.get_closest_marker(OWN) is not None:
            own.setdefault(module(item), []).append(item)
        else:
            rest.append(item)
    if not own:
        return
    last = {module(item): n for n, item in enumerate(rest)}
    ordered: list[pytest.Item] = []
    for n, item in enumerate(rest):
        ordered.append(item)
        if last[module(item)] == n:
            ordered.extend(own.pop(module(item), []))
    for left in own.values():  # modules whose every test has its own processes
        ordered.extend(left)
    items[:] = ordered


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = start_private_redis()
    yield server
    server.stop()


@pytest.fixture
def redis_shards() -> Iterator[list[PrivateRedis]]:
    """Two private redis-servers: the channel layer's shards (CHANNEL_REDIS_URLS)."""
    yield from private_redis_servers(2)


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


@pytest.fixture(scope="session")
def shared_processes(
    request: pytest.FixtureRequest, live_env: dict[str, str]
) -> Iterator[SharedProcesses]:
    """Processes handed on from test to test (tests/support/shared.py). On live_env, so
    they end before the test database is dropped."""
    registry = request.config.stash[SHARED] = SharedProcesses()
    yield registry
    registry.end_all()
    del request.config.stash[SHARED]


@pytest.fixture(autouse=True)
def _shared_processes_for_this_test(request: pytest.FixtureRequest) -> SharedProcesses | None:
    """Before a test's own fixtures: end the shared processes that must not run behind it
    (a test of the unit tier, too, without making the database for it)."""
    registry = request.config.stash.get(SHARED, None)
    if registry is not None:
        registry.before_test(request)
    return registry


@pytest.fixture(autouse=True)
def _clean_outbox_for_transactional_tests(
    request: pytest.FixtureRequest, _shared_processes_for_this_test: SharedProcesses | None
) -> Iterator[None]:
    """Start and end transactional tests with an empty outbox and no dispatch lease
    (but the lease of a worker shared with the next test: tests/support/shared.py).

    Django's flush only truncates tables it can see on the search_path, and the outbox
    lives in the messenger schema, so committed rows would otherwise leak between tests
    (into a later test that counts rows in its own transaction, too).
    Tests without the database (the unit tier) never touch it.
    """
    marker = request.node.get_closest_marker("django_db")
    marked = marker is not None and bool(marker.kwargs.get("transaction"))
    if "transactional_db" not in request.fixturenames and not marked:
        yield
        return
    request.getfixturevalue("django_db_setup")
    blocker: Any = request.getfixturevalue("django_db_blocker")

    def clean() -> None:
        registry = request.config.stash.get(SHARED, None)  # made by this test, maybe
        kept = registry.lease_holders() if registry is not None else []
        with blocker.unblock(), connection.cursor() as cur:
            if not kept:
                cur.execute("TRUNCATE messenger.realtime_outbox, messenger.realtime_dispatch_lease")
                return
            cur.execute("TRUNCATE messenger.realtime_outbox")
            cur.execute(
                "DELETE FROM messenger.realtime_dispatch_lease WHERE holder <> ALL(%s)", [kept]
            )

    clean()
    yield
    clean()
