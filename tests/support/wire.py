"""Speaking the hub's wire protocol in tests: negotiate over HTTP, plain WebSocket clients
that send exactly what a case needs, a client that never reads, and session cookies."""

import base64
import contextlib
import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support.helpers import layer
from tests.support.hub_helpers import token_for
from tests.support.runtime import run
from tests.support.workers import HubServer

RS = "\x1e"


def negotiate(
    server: HubServer,
    token: str | None = None,
    query: str = "?negotiateVersion=1",
    method: str = "POST",
    path: str = "/hubs/messenger/negotiate",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    request = urllib.request.Request(server.http + path + query, method=method, data=b"")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            return response.status, json.loads(body or b"{}"), dict(response.headers)
    except urllib.error.HTTPError as error:
        body = error.read()
        return error.code, json.loads(body or b"{}"), dict(error.headers)


def hub_socket(server: HubServer, token: str | None, query: str = "") -> ClientConnection:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return connect(f"{server.ws}/hubs/messenger{query}", additional_headers=headers)


def records(ws: ClientConnection, timeout: float = 5) -> list[dict[str, Any]]:
    """The JSON records of the next frame."""
    frame = ws.recv(timeout=timeout)
    text = frame if isinstance(frame, str) else frame.decode()
    assert text.endswith(RS), f"unterminated frame {text!r}"
    return [json.loads(part) for part in text.split(RS)[:-1]]


@contextlib.contextmanager
def joined(server: HubServer, user: Any, version: int = 1) -> Iterator[ClientConnection]:
    """A connection of `user` past the handshake."""
    with hub_socket(server, token_for(user.id)) as ws:
        ws.send(json.dumps({"protocol": "json", "version": version}) + RS)
        assert records(ws) == [{}]
        yield ws


def invoke(ws: ClientConnection, target: str, invocation_id: str = "1", **extra: Any) -> None:
    message = {"type": 1, "invocationId": invocation_id, "target": target, "arguments": []}
    ws.send(json.dumps({**message, **extra}) + RS)


def assert_closed(ws: ClientConnection) -> None:
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=5)


def session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


class StuckClient:
    """A WebSocket client that completes the hub handshake and then never reads again."""

    def __init__(self, server: HubServer, token: str) -> None:
        self.pinged = 0.0  # when ping() last sent one (monotonic)
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /hubs/messenger?access_token={token} HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(1)
        assert response.startswith(b"HTTP/1.1 101"), response
        self._send_text('{"protocol":"json","version":1}' + RS)

    def ping(self) -> None:
        """A SignalR ping, at most one a second (the official clients ping every 15 s;
        faster, Pings are a flood the hub closes): the client is alive, it just does not
        read. Once the server has dropped it (the point of these tests) there is nobody
        left to ping."""
        now = time.monotonic()
        if now - self.pinged < 1:
            return
        self.pinged = now
        with contextlib.suppress(OSError):
            self._send_text('{"type":6}' + RS)

    def _send_text(self, text: str) -> None:
        payload, mask = text.encode(), os.urandom(4)
        assert len(payload) < 126
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)

    def read_until_closed(self, timeout: float) -> str:
        """Read (only now) until the server ends the connection: 'closed', 'reset' or 'open'."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
            return "closed"
        except ConnectionResetError:
            return "reset"  # it gave up on the close handshake nobody was reading
        except TimeoutError:
            return "open"  # the server never let go of it
        finally:
            self.sock.close()


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


def push_to_user(user_id: Any, seq: int) -> None:
    """One user-group event through the real channel layer (no worker needed)."""

    async def push() -> None:
        message = {"type": "realtime.event", "event": "contact_removed", "payload": {"seq": seq}}
        await layer(str(settings.REDIS_URL)).group_send(f"user.{user_id}", message)

    run(push())


def events_until_closed(ws: ClientConnection, user_id: Any, until: float) -> dict[str, Any]:
    """Push an event to the user every ~0.2 s and read, until the server closes the
    connection: when each was pushed, which arrived, the Close record and when."""
    pushed: dict[int, float] = {}
    received: list[int] = []
    close: dict[str, Any] = {}
    closed_at = 0.0
    while time.time() < until:
        seq = len(pushed) + 1
        pushed[seq] = time.time()
        push_to_user(user_id, seq)
        try:
            for record in records(ws, timeout=0.2):
                if record.get("type") == 1:
                    received.append(record["arguments"][0]["seq"])
                elif record.get("type") == 7:
                    close, closed_at = record, time.time()
        except TimeoutError:
            continue
        except ConnectionClosed:
            break
    return {"pushed": pushed, "received": received, "close": close, "closed_at": closed_at}
