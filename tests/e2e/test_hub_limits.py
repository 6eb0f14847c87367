"""The hub's per-connection limits on the wire, against a real Daphne: oversized frames,
the session WebSocket's origin, token expiry and the send bound of a client that stops
reading."""

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from project.messenger import services
from tests.e2e.test_hub_wire import (
    RS,
    invoke,
    joined,
    records,
    session_cookie,
)
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.runtime import run
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
TOO_BIG = "The maximum message size of 32768B was exceeded."


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env)
    yield server
    server.kill()


def until_closed(ws: ClientConnection, timeout: float = 10) -> list[dict[str, Any]]:
    """Every record the server sends until it closes the connection."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            seen += records(ws, timeout=deadline - time.monotonic())
    except ConnectionClosed:
        return seen
    raise AssertionError(f"still open after {timeout}s: {seen[-3:]}")


# -- oversized frames and messages ---------------------------------------------------


@pytest.mark.parametrize("size", [40_000, 2 * 1024 * 1024])
def test_an_oversized_frame_gets_the_hubs_close_message_then_a_close(
    daphne: DaphneProcess, size: int
) -> None:
    user = UserFactory()
    with joined(daphne, user) as bystander, joined(daphne, user) as sender:
        sender.send("x" * size)
        (close,) = until_closed(sender)
        assert close["type"] == 7 and TOO_BIG in close["error"]
        assert close["error"].startswith("Connection closed with an error. InvalidDataException:")
        invoke(bystander, "GetGroups")
        assert records(bystander)[0]["result"] == [f"user:{user.id}"]


def test_a_message_fragmented_into_small_frames_gets_the_same_close(
    daphne: DaphneProcess,
) -> None:
    with joined(daphne, UserFactory()) as sender:
        sender.send(["x" * 16_000 for _ in range(4)])  # four frames, one 64 kB message
        (close,) = until_closed(sender)
        assert TOO_BIG in close["error"]


def test_events_larger_than_the_incoming_limit_still_reach_clients(daphne: DaphneProcess) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    with joined(daphne, bob) as ws:
        body = "\u00e9" * 30_000  # 60 kB of UTF-8: over MAX_MESSAGE_SIZE, sent by the server

        async def push() -> None:
            message = {"type": "realtime.event", "chat": str(chat.id), "event": "message_received"}
            await layer(str(settings.REDIS_URL)).group_send(
                f"chat.{chat.id}", {**message, "payload": {"seq": 1, "body": body}}
            )

        run(push())
        (event,) = records(ws)
        assert event["arguments"][0]["body"] == body


# -- the session WebSocket's origin --------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "accepted"),
    [
        ("http://127.0.0.1:{port}", True),
        ("https://127.0.0.1:{port}", False),  # same host and port, another scheme
        ("http://127.0.0.1:{other}", False),
        ("http://localhost:{port}", False),
    ],
)
def test_a_session_websocket_is_accepted_only_from_the_same_scheme_host_and_port(
    daphne: DaphneProcess, origin: str, accepted: bool
) -> None:
    cookie = session_cookie(UserFactory())
    url = f"{daphne.ws}/hubs/messenger"
    page = origin.format(port=daphne.port, other=daphne.port + 1)
    if accepted:
        with connect(url, additional_headers={"Cookie": cookie}, origin=page) as ws:
            ws.send('{"protocol":"json","version":1}' + RS)
            assert records(ws) == [{}]
        return
    with (
        pytest.raises(InvalidStatus) as refused,
        connect(url, additional_headers={"Cookie": cookie}, origin=page),
    ):
        pass
    assert refused.value.response.status_code == 403
