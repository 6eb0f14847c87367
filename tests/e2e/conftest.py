"""Fixtures of the end-to-end tier: the hub (Daphne + worker) and real clients."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.hub_clients import Hub, HubClient, TwoHubs
from tests.support.hub_helpers import token_for
from tests.support.served import Served
from tests.support.shared import env_key, shared


@pytest.fixture
def hub_env(worker_env: dict[str, str]) -> dict[str, str]:
    """The hub's environment; a module overrides this fixture to change settings."""
    return worker_env


@pytest.fixture
def hub(request: pytest.FixtureRequest, hub_env: dict[str, str]) -> Iterator[Hub]:
    """Daphne and the worker: the test before's when it used them with the same settings
    (tests/support/shared.py); a test marked own_processes gets its own."""
    yield from shared(request, ("hub", env_key(hub_env)), lambda: Hub(hub_env))


@pytest.fixture
def hubs(request: pytest.FixtureRequest, worker_env: dict[str, str]) -> Iterator[TwoHubs]:
    """The worker and two Daphne processes on the same database and Redis; shared as `hub`."""
    yield from shared(request, ("hubs", env_key(worker_env)), lambda: TwoHubs(worker_env))


@pytest.fixture
def clients(hub: Hub) -> Iterator[Any]:
    started: list[HubClient] = []

    def connect(
        user: Any, library: str = "@microsoft/signalr", options: dict[str, Any] | None = None
    ) -> HubClient:
        client = HubClient(library, hub.url, token_for(user.id), hub.env, options)
        started.append(client)
        client.next("state", "connected")
        return client

    yield connect
    for client in started:
        client.kill()


@pytest.fixture
def served(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Served]:
    """`scripts/serve --hubs 2` (two Daphnes behind nginx, the worker) on the test database."""
    server = Served(worker_env, tmp_path / "local")
    try:
        yield server
    finally:
        server.kill()
