"""Fixtures of the end-to-end tier: the hub (Daphne + worker) and real clients."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.hub_clients import Hub, HubClient, TwoHubs
from tests.support.hub_helpers import token_for


@pytest.fixture
def hub_env(worker_env: dict[str, str]) -> dict[str, str]:
    """The hub's environment; a module overrides this fixture to change settings."""
    return worker_env


@pytest.fixture
def hub(hub_env: dict[str, str]) -> Iterator[Hub]:
    server = Hub(hub_env)
    yield server
    server.close()


@pytest.fixture
def hubs(worker_env: dict[str, str]) -> Iterator[TwoHubs]:
    """The worker and two Daphne processes on the same database and Redis."""
    pair = TwoHubs(worker_env)
    yield pair
    pair.close()


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
