"""The hub's routes in front of the host's application (hub/routing.py)."""

import asyncio
import functools
from typing import Any

import pytest
from asgiref.compatibility import guarantee_single_callable

from messenger_realtime.hub.negotiate import negotiate
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.routing import hub_route, routed
from messenger_realtime.hub.transports.http import HubHttpConsumer
from messenger_realtime.hub.transports.websocket import HubConsumer


def scope(kind: str, path: str, root: str = "") -> dict[str, Any]:
    return {"type": kind, "path": path, "root_path": root}


@pytest.mark.parametrize(
    ("kind", "path", "root", "expected"),
    [
        ("websocket", "/hubs/messenger", "", HubConsumer),
        ("http", "/hubs/messenger", "", HubHttpConsumer),
        ("websocket", "/chat/hubs/messenger", "/chat", HubConsumer),
    ],
)
def test_the_hub_path_goes_to_the_hub_transport_of_its_kind(
    kind: str, path: str, root: str, expected: type
) -> None:
    assert isinstance(hub_route(scope(kind, path, root), HubProcess()), expected)


@pytest.mark.parametrize("path", ["/hubs/messenger/negotiate", "/hubs/messenger/negotiate/"])
def test_negotiate_with_or_without_its_slash(path: str) -> None:
    hub = HubProcess()
    route = hub_route(scope("http", path), hub)
    assert isinstance(route, functools.partial)
    assert route.func is negotiate and route.args == (hub,)  # negotiate for this process


@pytest.mark.parametrize(
    ("kind", "path", "root"),
    [
        ("http", "/api/chats", ""),
        ("http", "/hubs/messenger/negotiatex", ""),
        ("websocket", "/hubs/messenger/negotiate", ""),  # negotiate is HTTP only
        ("websocket", "/hubs/messengers", ""),
        ("websocket", "/hubs/messenger", "/chat"),  # outside the root path
        ("lifespan", "/hubs/messenger", ""),
    ],
)
def test_every_other_request_is_not_the_hubs(kind: str, path: str, root: str) -> None:
    assert hub_route(scope(kind, path, root), HubProcess()) is None


def test_the_host_gets_the_rest_and_no_router_frame_is_left_between() -> None:
    seen: list[dict[str, Any]] = []

    async def host(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)

    application = routed(host)
    # Daphne makes every application a single callable; this one must stay itself.
    assert guarantee_single_callable(application) is application
    request = scope("http", "/api/chats")
    running = application(request, None, None)
    # The host's own coroutine, returned rather than awaited by a frame of the router's.
    assert asyncio.iscoroutine(running) and running.cr_code is host.__code__  # type: ignore[attr-defined]
    asyncio.run(running)  # type: ignore[arg-type]
    assert seen == [request]
