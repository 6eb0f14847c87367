"""permessage-deflate on the hub's WebSockets (issue 49, item 4), against a real Daphne and
the real worker: what the hub answers to an offer (the 101's Sec-WebSocket-Extensions),
with WEBSOCKET_DEFLATE on and off, what the compressed frames are on the wire (a raw
client reads them: RSV1, inflated by zlib as RFC 7692 says), and real clients (the
official JavaScript client under Node, websockets) receiving events and sending compressed
messages."""

import base64
import contextlib
import json
import os
import socket
import zlib
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub
from tests.support.hub_helpers import token_for
from tests.support.wire import RS
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
OFFER = "permessage-deflate; client_max_window_bits"  # what browsers and Node's ws offer
ANSWER = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
# A chat message of ordinary length: its event is well past what the hub compresses.
BODY = "Привет! Созвонимся завтра в десять, обсудим план релиза и тесты. See you then."
HANDSHAKES = {
    "json": b'{"protocol":"json","version":1}\x1e',
    "messagepack": b'{"protocol":"messagepack","version":1}\x1e',
}


class RawSocket:
    """A WebSocket client that shows the frames as they are on the wire: the hub's answer
    to the upgrade, and each frame's first byte (FIN, RSV1, opcode) with its payload."""

    def __init__(self, port: int, token: str, extensions: str | None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        offer = f"Sec-WebSocket-Extensions: {extensions}\r\n" if extensions else ""
        self.sock.sendall(
            (
                f"GET /hubs/messenger?access_token={token} HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n"
            ).encode()
        )
        self.buffer = b""
        head = self._until(b"\r\n\r\n").decode()
        assert head.startswith("HTTP/1.1 101"), head
        self.headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in head.split("\r\n")[1:])
        }

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            self._read()
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def _read(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the server")
        self.buffer += data

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._read()
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    def send(self, payload: bytes, opcode: int = 0x1) -> None:
        """One masked, uncompressed, final frame (a short one)."""
        assert len(payload) < 126
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def frame(self) -> tuple[int, bytes]:
        """The next frame: its first byte and its payload (server frames are unmasked)."""
        first, second = self._take(2)
        size = second & 0x7F
        if size == 126:
            size = int.from_bytes(self._take(2), "big")
        elif size == 127:
            size = int.from_bytes(self._take(8), "big")
        return first, self._take(size)

    def close(self) -> None:
        self.sock.close()


def inflate(payload: bytes) -> bytes:
    """A compressed message's payload inflated as RFC 7692 7.2.2 says (its tail put back)."""
    return zlib.decompressobj(-zlib.MAX_WBITS).decompress(payload + b"\x00\x00\xff\xff")


@pytest.fixture
def raw(hub: Hub) -> Iterator[Any]:
    opened: list[RawSocket] = []

    def open_socket(
        user: Any, extensions: str | None, protocol: str = "json", port: int | None = None
    ) -> RawSocket:
        sock = RawSocket(port or hub.daphne.port, token_for(user.id), extensions)
        opened.append(sock)
        sock.send(HANDSHAKES[protocol])
        first, answer = sock.frame()
        assert answer == b"{}\x1e" and first & 0x40 == 0  # too small to be compressed
        return sock

    yield open_socket
    for sock in opened:
        sock.close()


def decoded(payload: bytes, protocol: str) -> tuple[str, list[Any]]:
    """An invocation's target and arguments, from its one record."""
    if protocol == "json":
        record = json.loads(payload[:-1])
        return record["target"], record["arguments"]
    size, shift, offset = 0, 0, 0  # MessagePack records start with their length (varint)
    while True:
        byte, offset = payload[offset], offset + 1
        size, shift = size | (byte & 0x7F) << shift, shift + 7
        if not byte & 0x80:
            break
    assert offset + size == len(payload)
    message = msgpack.unpackb(payload[offset:], timestamp=3)
    return message[3], message[4]


def delivery(sock: RawSocket, protocol: str = "json") -> tuple[int, bytes]:
    """The frame of the next message_received event, as it came (a Ping or the chat's
    own chat_updated may come first)."""
    while True:
        first, payload = sock.frame()
        message = inflate(payload) if first & 0x40 else payload
        if message in (b'{"type":6}\x1e', b"\x02\x91\x06"):
            continue
        if decoded(message, protocol)[0] == "message_received":
            return first, payload


def test_an_offer_is_answered_with_deflate_without_context_takeover(hub: Hub, raw: Any) -> None:
    sock = raw(UserFactory(), OFFER)
    assert sock.headers["sec-websocket-extensions"] == ANSWER


def test_a_clients_bound_on_the_servers_window_is_kept_in_the_answer(hub: Hub, raw: Any) -> None:
    sock = raw(UserFactory(), "permessage-deflate; server_max_window_bits=10")
    assert sock.headers["sec-websocket-extensions"] == (
        "permessage-deflate; server_no_context_takeover; server_max_window_bits=10;"
        " client_no_context_takeover"
    )


def test_a_client_that_offers_nothing_gets_plain_frames(hub: Hub, raw: Any) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    sock = raw(bob, None)
    assert "sec-websocket-extensions" not in sock.headers
    services.post_message(alice.id, chat.id, BODY)
    first, payload = delivery(sock)
    assert first == 0x81  # final, text, RSV1 clear
    assert json.loads(payload[:-1])["arguments"][0]["body"] == BODY


@pytest.mark.parametrize("protocol", ["json", "messagepack"])
def test_a_compressed_delivery_decodes_to_the_same_event(hub: Hub, raw: Any, protocol: str) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id])
    deflating, plain = raw(bob, OFFER, protocol), raw(carol, None, protocol)
    services.post_message(alice.id, chat.id, BODY)
    (deflated_first, deflated_payload), (plain_first, plain_payload) = (
        delivery(deflating, protocol),
        delivery(plain, protocol),
    )
    opcode = 0x2 if protocol == "messagepack" else 0x1
    assert deflated_first == 0x80 | 0x40 | opcode  # final, compressed (RSV1)
    assert plain_first == 0x80 | opcode
    # Byte for byte the event the plain client got, in fewer bytes.
    assert inflate(deflated_payload) == plain_payload
    assert len(deflated_payload) < len(plain_payload)
    target, arguments = decoded(plain_payload, protocol)
    assert target == "message_received"
    assert arguments[0]["body"] == BODY


def test_websocket_deflate_off_answers_an_offer_without_it(
    hub: Hub, raw: Any, worker_env: dict[str, str]
) -> None:
    daphne = DaphneProcess(worker_env, websocket_deflate="false")
    try:
        alice, bob = UserFactory(), UserFactory()
        chat = services.create_chat(alice.id, [bob.id])
        sock = raw(bob, OFFER, port=daphne.port)
        assert "sec-websocket-extensions" not in sock.headers
        services.post_message(alice.id, chat.id, BODY)  # hub's worker: same database, Redis
        first, payload = delivery(sock)
        assert first == 0x81  # not compressed
        assert json.loads(payload[:-1])["arguments"][0]["body"] == BODY
    finally:
        daphne.kill()


@contextlib.contextmanager
def deflating(hub: Hub, user: Any) -> Iterator[Any]:
    """A `websockets` client past the JSON handshake, deflate negotiated: it compresses
    every message it sends."""
    headers = {"Authorization": f"Bearer {token_for(user.id)}"}
    with connect(f"{hub.daphne.ws}/hubs/messenger", additional_headers=headers) as ws:
        assert ws.response.headers["Sec-WebSocket-Extensions"] == ANSWER
        ws.send('{"protocol":"json","version":1}' + RS)
        assert ws.recv(timeout=5) == "{}" + RS
        yield ws


def test_a_client_that_compresses_what_it_sends_is_understood(hub: Hub) -> None:
    user = UserFactory()
    with deflating(hub, user) as ws:
        ws.send('{"type":6}' + RS)  # a compressed Ping: taken, no answer
        ws.send(json.dumps({"type": 1, "invocationId": "1", "target": "GetGroups"}) + RS)
        answer = ws.recv(timeout=5)
        while answer == '{"type":6}' + RS:
            answer = ws.recv(timeout=5)
        assert json.loads(answer[:-1]) == {
            "type": 3,
            "invocationId": "1",
            "result": [f"user:{user.id}"],
        }


def test_a_compressed_message_too_big_once_inflated_gets_the_hubs_close(hub: Hub) -> None:
    with deflating(hub, UserFactory()) as ws:
        ws.send("x" * 40_000)  # a few hundred bytes compressed, over MAX_MESSAGE_SIZE inflated
        seen = []
        with pytest.raises(ConnectionClosed):
            while True:
                seen.append(ws.recv(timeout=5))
        close = json.loads(seen[-1][:-1])
        assert close["type"] == 7
        assert "InvalidDataException: The maximum message size of 32768B" in close["error"]
        assert ws.close_code == 1009


@pytest.mark.parametrize("messagepack", [False, True])
def test_the_official_client_negotiates_deflate_and_receives_events(
    hub: Hub, clients: Any, messagepack: bool
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = clients(bob, options={"messagepack": messagepack})
    client.send_line("extensions")
    assert client.next("extensions")["extensions"] == "permessage-deflate"
    message = services.post_message(alice.id, chat.id, BODY)
    payload = client.message()
    assert payload["messageId"] == str(message.id)
    assert payload["body"] == BODY
