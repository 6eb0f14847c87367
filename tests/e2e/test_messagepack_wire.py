"""The MessagePack hub protocol on the wire, against a real Daphne and a plain ASGI server
(Uvicorn: the hub without Daphne's controls, hub/transports/plain_asgi.py), with a plain
WebSocket client: binary frames both ways, invocations, completions, pings, Close,
events, and the protocol's error for every kind of bad input (oversized frames included)."""

import json
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from websockets.sync.client import ClientConnection

from messenger_realtime.hub.protocols.messagepack import frame
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.wire import RS, assert_closed, hub_socket, negotiate, push_to_user
from tests.support.workers import DaphneProcess, HubServer, UvicornProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
HANDSHAKE = '{"protocol":"messagepack","version":1}' + RS
ERROR = "Connection closed with an error. InvalidDataException: "


@pytest.fixture(scope="module", params=[DaphneProcess, UvicornProcess], ids=["daphne", "uvicorn"])
def server(request: pytest.FixtureRequest, live_env: dict[str, str]) -> Iterator[HubServer]:
    process: HubServer = request.param(live_env)
    yield process
    process.kill()


def packed(*message: Any) -> bytes:
    return frame(msgpack.packb(list(message), use_bin_type=True))


def messages(ws: ClientConnection, timeout: float = 5) -> list[list[Any]]:
    """The MessagePack messages of the next frame, which must be binary."""
    data = ws.recv(timeout=timeout)
    assert isinstance(data, bytes), f"a text frame on a binary connection: {data!r}"
    found, offset = [], 0
    while offset < len(data):
        length, shift = 0, 0
        while True:
            byte = data[offset]
            length, shift, offset = length | (byte & 0x7F) << shift, shift + 7, offset + 1
            if not byte & 0x80:
                break
        found.append(msgpack.unpackb(data[offset : offset + length], raw=False, timestamp=3))
        offset += length
    return found


def connected(server: HubServer, user: Any) -> ClientConnection:
    return hub_socket(server, token_for(user.id))


def handshake(ws: ClientConnection) -> None:
    ws.send(HANDSHAKE)  # as the official client: the handshake in a text frame
    data = ws.recv(timeout=5)
    assert data == b"{}" + RS.encode()  # the answer in a binary frame


def test_negotiate_offers_binary_frames_on_websockets(server: HubServer) -> None:
    _, body, _ = negotiate(server, token_for(UserFactory().id))
    assert body["availableTransports"][0] == {
        "transport": "WebSockets",
        "transferFormats": ["Text", "Binary"],
    }


def test_invocations_completions_pings_and_events_are_messagepack_arrays(
    server: HubServer,
) -> None:
    user = UserFactory()
    with connected(server, user) as ws:
        handshake(ws)
        ws.send(packed(6))  # a ping: no answer
        ws.send(packed(42, "from the future"))  # an unknown type: ignored
        ws.send(packed(1, {}, "1", "GetGroups", []))  # 5 items, as the JS client
        assert messages(ws) == [[3, {}, "1", 3, [f"user:{user.id}"]]]
        ws.send(packed(1, {}, "2", "GetGroups", [1]))  # a wrong argument count
        ((kind, _, invocation_id, result_kind, error),) = messages(ws)
        assert (kind, invocation_id, result_kind) == (3, "2", 1)
        assert "Invocation provides 1 argument(s) but target expects 0." in error
        ws.send(packed(1, {}, "3", "Nope", [], []))  # 6 items, with headers and streamIds
        assert "Method does not exist." in messages(ws)[0][4]
        push_to_user(user.id, 7)
        assert messages(ws) == [[1, {}, None, "contact_removed", [{"seq": 7}], []]]
        ws.send(packed(7, None))  # the JS client's Close
        assert_closed(ws)


def test_the_handshake_and_messages_may_share_a_frame_and_messages_may_span_frames(
    server: HubServer,
) -> None:
    with connected(server, UserFactory()) as ws:
        call = packed(1, {}, "a", "GetGroups", [])
        ws.send(HANDSHAKE.encode() + call + call[:3])  # binary: handshake, one, part of two
        assert ws.recv(timeout=5) == b"{}" + RS.encode()
        assert messages(ws)[0][2] == "a"
        ws.send(call[3:].replace(b"\xa1a", b"\xa1b"))
        assert messages(ws)[0][2] == "b"


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (frame(b"\x05"), "Reading 'messageType' as Int32 failed."),
        (frame(msgpack.packb([1, None, None, "x", []])), "Reading map length for 'headers'"),
        (frame(msgpack.packb([9, "1"])), "Reading 'sequenceId' as Int64 failed."),
        (frame(b"\x91\xc1"), "Invalid MessagePack data (FormatError)."),
        (bytes([0x81, 0x81, 0x04]), "The maximum message size of 32768B was exceeded."),
        (b"\xff\xff\xff\xff\x7f", "Messages over 2GB in size are not supported."),
    ],
)
def test_bad_messagepack_closes_only_its_connection_with_the_protocols_error(
    server: HubServer, data: bytes, error: str
) -> None:
    user = UserFactory()
    with connected(server, user) as bystander, connected(server, user) as broken:
        handshake(bystander)
        handshake(broken)
        broken.send(data)
        ((kind, text, allow_reconnect),) = messages(broken)
        assert (kind, allow_reconnect) == (7, False)
        assert text.startswith(ERROR) and error in text
        assert_closed(broken)
        bystander.send(packed(1, {}, "1", "GetGroups", []))
        assert messages(bystander)[0][4] == [f"user:{user.id}"]


def test_an_oversized_binary_frame_gets_the_close_in_messagepack(server: HubServer) -> None:
    if isinstance(server, UvicornProcess):
        pytest.skip(
            "Daphne's frame limit writes the hub's Close (hub/daphne/websocket_protocol.py)"
        )
    with connected(server, UserFactory()) as ws:
        handshake(ws)
        ws.send(b"\x00" * 40_000)  # over Daphne's frame limit: refused before the hub
        ((kind, text, _),) = messages(ws)
        assert kind == 7 and "The maximum message size of 32768B was exceeded." in text
        assert_closed(ws)


def test_json_connections_are_untouched_by_messagepack_ones(server: HubServer) -> None:
    user = UserFactory()
    with connected(server, user) as binary, connected(server, user) as text:
        handshake(binary)
        text.send('{"protocol":"json","version":1}' + RS)
        assert text.recv(timeout=5) == "{}" + RS
        push_to_user(user.id, 1)
        assert messages(binary)[0][4] == [{"seq": 1}]
        received = text.recv(timeout=5)
        assert isinstance(received, str)
        assert json.loads(received.rstrip(RS))["arguments"] == [{"seq": 1}]
