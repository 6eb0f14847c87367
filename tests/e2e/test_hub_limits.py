"""The hub's per-connection limits on the wire, against a real Daphne: oversized frames,
the session WebSocket's origin, token expiry and the send bound of a client that stops
reading."""

import threading
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from messenger_realtime.conf.settings import load_hub_options
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.hub_helpers import token_for
from tests.support.runtime import run
from tests.support.wire import (
    RS,
    StuckClient,
    events_until_closed,
    hub_socket,
    invoke,
    joined,
    records,
    session_cookie,
    until_closed,
)
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
TOO_BIG = "The maximum message size of 32768B was exceeded."


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env)
    yield server
    server.kill()


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


# -- token and session lifetime ------------------------------------------------------


def test_a_connection_is_closed_at_its_tokens_expiry_and_forwards_nothing_after(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    token = token_for(user.id, lifetime=3)
    # The token holds until its exp plus JWT_LEEWAY (a skewed issuer's clock forgiven).
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    expires += load_hub_options().jwt_leeway
    with hub_socket(daphne, token) as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        assert records(ws) == [{}]
        seen = events_until_closed(ws, user.id, until=expires + 5)
    assert seen["close"] == {"type": 7, "allowReconnect": True}
    assert seen["closed_at"] >= expires
    assert seen["received"], "events before the expiry are delivered"
    assert all(seen["pushed"][seq] < expires for seq in seen["received"])
    assert any(at >= expires for at in seen["pushed"].values())
    daphne.wait_for(f"hub connection closed.*UserId={user.id}.*reason=token expired")


def session_cookie_expiring(user: Any, seconds: int) -> tuple[str, float]:
    """A signed-in session of `user` that expires in `seconds` (cookie, expiry time)."""
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.set_expiry(seconds)
    store.save()
    expires = Session.objects.get(session_key=store.session_key).expire_date.timestamp()
    return f"sessionid={store.session_key}", expires


def test_a_session_connection_is_closed_when_the_session_expires(daphne: DaphneProcess) -> None:
    user = UserFactory()
    cookie, expires = session_cookie_expiring(user, 3)
    url = f"{daphne.ws}/hubs/messenger"
    with connect(url, additional_headers={"Cookie": cookie}, origin=daphne.http) as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        assert records(ws) == [{}]
        seen = events_until_closed(ws, user.id, until=expires + 5)
    assert seen["close"] == {"type": 7, "allowReconnect": True}
    assert seen["closed_at"] >= expires
    assert all(seen["pushed"][seq] < expires for seq in seen["received"])


# -- the send bound --------------------------------------------------------------------


@pytest.fixture
def bounded_daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, send_buffer_limit=256 * 1024)
    yield server
    server.kill()


def test_a_client_that_pings_but_never_reads_is_closed_past_the_send_bound(
    bounded_daphne: DaphneProcess,
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    stuck = StuckClient(bounded_daphne, token_for(bob.id))
    bounded_daphne.wait_for(f"hub connected.* UserId={bob.id}")
    events, pad = 300, "x" * 8000  # 2.4 MB for each reader: far past the 256 kB bound
    with joined(bounded_daphne, alice) as reader:

        async def flood() -> None:
            channel_layer = layer(str(settings.REDIS_URL))
            for seq in range(events):
                message = {"type": "realtime.event", "chat": str(chat.id)}
                message.update(event="message_received", payload={"seq": seq, "pad": pad})
                await channel_layer.group_send(f"chat.{chat.id}", message)
                if seq % 50 == 0:
                    stuck.ping()  # alive and pinging, just not reading

        flooding = threading.Thread(target=run, args=(flood(),))
        flooding.start()
        received = 0
        while received < events:  # alice reads every event, as it comes, while bob is stuck
            for record in records(reader):
                if record.get("target") == "message_received":
                    assert record["arguments"][0]["seq"] == received
                    received += 1
        flooding.join()
    line = bounded_daphne.wait_for(f"hub connection closed.*UserId={bob.id}")
    assert "reason=send buffer over SEND_BUFFER_LIMIT" in line and "ConnectionId=" in line
    assert "pad" not in line and pad[:100] not in line  # ids, never a body
    assert stuck.read_until_closed(timeout=30) != "open"
