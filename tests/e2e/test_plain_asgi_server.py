"""The hub served by a plain ASGI server: project.asgi under Uvicorn, which gives the hub
none of Daphne's controls (hub/transports/server.py), so the hub speaks standard ASGI
messages from its own bounded buffers (hub/transports/plain_asgi.py). Real clients:
negotiate, the WebSocket handshake, JSON invocations and events, pings both ways, the
client timeout's Close, a client's Close, the official-protocol pysignalr client, and a
client that stops reading. The MessagePack checks run under both servers
(tests/e2e/test_messagepack_wire.py)."""

import threading
from collections.abc import Iterator

import pytest
from django.conf import settings

from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from project.messenger import services
from tests.support.dispatch import one_pass
from tests.support.factories import UserFactory
from tests.support.helpers import layer, options
from tests.support.hub_clients import HubClient
from tests.support.hub_helpers import token_for
from tests.support.runtime import run
from tests.support.wire import (
    RS,
    StuckClient,
    assert_closed,
    hub_socket,
    invoke,
    joined,
    negotiate,
    push_to_user,
    records,
)
from tests.support.workers import UvicornProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
EVENTS, PAD = 300, 24_000  # 7 MB: more than the kernel and Uvicorn hold for a socket


@pytest.fixture(scope="module")
def uvicorn(live_env: dict[str, str]) -> Iterator[UvicornProcess]:
    server = UvicornProcess(live_env)
    yield server
    server.kill()


@pytest.fixture
def quick_uvicorn(live_env: dict[str, str]) -> Iterator[UvicornProcess]:
    server = UvicornProcess(live_env, keepalive_interval=0.3, client_timeout=1.5)
    yield server
    server.kill()


def dispatch_once() -> None:
    """One pass of the dispatcher in this process: committed rows reach the hub."""
    run(one_pass(options(), ChannelLayerPublisher(layer(str(settings.REDIS_URL)))))


def test_negotiate_then_the_websocket_handshake_and_a_json_invocation(
    uvicorn: UvicornProcess,
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    token = token_for(bob.id)
    status, body, _ = negotiate(uvicorn, token)
    assert status == 200 and body["negotiateVersion"] == 1
    with hub_socket(uvicorn, token, f"?id={body['connectionToken']}") as ws:
        ws.send('{"protocol":"json","version":1}' + RS)
        assert records(ws) == [{}]
        invoke(ws, "GetGroups")
        assert records(ws) == [
            {"type": 3, "invocationId": "1", "result": [f"user:{bob.id}", f"chat:{chat.id}"]}
        ]
        invoke(ws, "Nope", "2")
        (answer,) = records(ws)
        assert answer["invocationId"] == "2" and "Method does not exist." in answer["error"]


def test_a_pushed_event_reaches_a_json_connection(uvicorn: UvicornProcess) -> None:
    user = UserFactory()
    with joined(uvicorn, user) as ws:
        push_to_user(user.id, 3)
        assert records(ws) == [{"type": 1, "target": "contact_removed", "arguments": [{"seq": 3}]}]


def test_server_pings_client_pings_keep_it_open_and_silence_closes_it(
    quick_uvicorn: UvicornProcess,
) -> None:
    with joined(quick_uvicorn, UserFactory()) as ws:
        for _ in range(10):  # ~3 s of server pings, twice the client timeout
            assert records(ws, timeout=5) == [{"type": 6}]
            ws.send('{"type":6}' + RS)
        invoke(ws, "GetGroups")
        seen = records(ws)
        while "result" not in seen[-1]:
            seen += records(ws)
        seen = []
        while not seen or seen[-1]["type"] == 6:  # now silent: pings, then the Close
            seen += records(ws, timeout=5)
        assert seen[-1] == {
            "type": 7,
            "error": "Connection closed with an error. OperationCanceledException: Client "
            "hasn't sent a message/ping within the configured ClientTimeoutInterval.",
            "allowReconnect": True,
        }
        assert_closed(ws)


def test_a_clients_close_ends_the_connection(uvicorn: UvicornProcess) -> None:
    with joined(uvicorn, UserFactory()) as ws:
        ws.send('{"type":7}' + RS)
        assert_closed(ws)


def test_the_pysignalr_client_connects_invokes_and_receives_a_message(
    uvicorn: UvicornProcess, worker_env: dict[str, str]
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    url = f"{uvicorn.http}/hubs/messenger"
    client = HubClient("pysignalr", url, token_for(bob.id), worker_env)
    try:
        client.next("state", "connected")
        assert sorted(client.groups()) == sorted([f"user:{bob.id}", f"chat:{chat.id}"])
        message = services.post_message(alice.id, chat.id, "over plain ASGI")
        dispatch_once()
        payload = client.message()
        assert (payload["messageId"], payload["body"]) == (str(message.id), "over plain ASGI")
    finally:
        client.kill()


def test_a_client_that_stops_reading_is_closed_by_the_hubs_own_bound(
    live_env: dict[str, str],
) -> None:
    """No Daphne to count unsent bytes: once the kernel's send buffer (up to tcp_wmem's
    4 MB here) and Uvicorn's are full, the hub's own buffer fills, past SEND_BUFFER_LIMIT
    the connection ends, and a reader of the same chat misses nothing."""
    server = UvicornProcess(live_env)  # SEND_BUFFER_LIMIT: its default, 1 MiB
    stuck: StuckClient | None = None
    try:
        alice, bob = UserFactory(), UserFactory()
        chat = services.create_chat(alice.id, [bob.id])
        stuck = StuckClient(server, token_for(bob.id))
        server.wait_for(f"hub connected.* UserId={bob.id}")
        with joined(server, alice) as reader:
            invoke(reader, "GetGroups")  # alice's groups include the chat: flood it
            while "result" not in records(reader)[-1]:
                pass
            body = "x" * PAD

            async def flood() -> None:
                channel_layer = layer(str(settings.REDIS_URL))
                for seq in range(EVENTS):
                    await channel_layer.group_send(
                        f"chat.{chat.id}",
                        {
                            "type": "realtime.event",
                            "chat": str(chat.id),
                            "event": "message_received",
                            "payload": {"seq": seq, "pad": body},
                        },
                    )

            flooding = threading.Thread(target=run, args=(flood(),))
            flooding.start()
            received = 0
            while received < EVENTS:  # alice reads every event while bob is stuck
                for record in records(reader):
                    if record.get("target") == "message_received":
                        assert record["arguments"][0]["seq"] == received
                        received += 1
                    elif record["type"] == 6:
                        reader.send('{"type":6}' + RS)
                stuck.ping()  # bob is alive, he only does not read
            flooding.join()
        line = server.wait_for(f"hub connection closed.*UserId={bob.id}")
        assert "SEND_BUFFER_LIMIT" in line
    finally:
        if stuck is not None:
            stuck.sock.close()  # even when an assertion failed: no socket left to the GC
        server.kill()
