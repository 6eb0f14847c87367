"""Hot-path cost of the hub's delivery checks (issue 13): `python bench/hub_delivery.py`.

Measures, in-process and without a network, the CPU time per event of
the hub's layer_messages.dispatch down to the WebSocket's ASGI send (what every delivered
event costs the hub; the same event in MessagePack too) for an unversioned
chat event (the held-set check alone, as before issue 13) and for a versioned one (the
membership-version check, plus the expiry check both pay), and the per-send cost of the
send-bound check Daphne's protocol runs (Twisted's buffer each send, the socket's queue
once per eighth of SEND_BUFFER_LIMIT), on a real connected socket. Prints JSON.
"""

import asyncio
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

from messenger_realtime.conf.settings import load_hub_options  # noqa: E402
from messenger_realtime.hub.connection import HubConnection, layer_messages  # noqa: E402
from messenger_realtime.hub.credentials.tokens import Identity  # noqa: E402
from messenger_realtime.hub.daphne import websocket_protocol  # noqa: E402
from messenger_realtime.hub.process import HubProcess  # noqa: E402
from messenger_realtime.hub.protocols import JsonProtocol, MessagePackProtocol  # noqa: E402
from messenger_realtime.hub.transports.websocket import HubConsumer, WebSocketTransport  # noqa: E402

EVENTS = 200_000
REPEATS = 5


def consumer(chat: uuid.UUID, binary: bool = False) -> HubConnection:
    """A connection past its handshake on a WebSocket whose ASGI send does nothing."""
    socket_consumer = HubConsumer(HubProcess())

    async def base_send(message: dict[str, Any]) -> None:
        return None

    socket_consumer.base_send, socket_consumer.scope = base_send, {}
    options = load_hub_options()
    hub = HubConnection(
        hub=HubProcess(),
        connection_id=uuid.uuid4().hex,
        identity=Identity(uuid.uuid4(), None),
        token=None,
        options=options,
        transport=WebSocketTransport(socket_consumer),
        channel_layer=None,
    )
    hub.handshaken = True
    size = options.max_message_size
    hub.protocol = MessagePackProtocol(size) if binary else JsonProtocol(size)
    hub.groups.memberships.update({chat: 7})
    hub.loop = SimpleNamespace(time=time.monotonic)  # type: ignore[assignment]
    return hub


async def per_event(version: int | None, binary: bool = False) -> float:
    """Best of REPEATS: microseconds per dispatched event, encoding and send included."""
    chat = uuid.uuid4()
    hub = consumer(chat, binary)
    message = {
        "type": "realtime.event",
        "chat": str(chat),
        "event": "message_received",
        "payload": {"chatId": str(chat), "seq": 1, "body": "hello"},
    }
    if version is not None:
        message["membership_version"] = version
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(EVENTS):
            await layer_messages.dispatch(hub, message)
        best = min(best, time.perf_counter() - started)
    return best / EVENTS * 1e6


def send_check() -> dict[str, float]:
    """Microseconds per call: the check as a send runs it, and the syscall alone."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    transport = SimpleNamespace(getHandle=lambda: peer, dataBuffer=b"", offset=0, _tempDataLen=0)
    protocol = websocket_protocol.HubWebSocketProtocol.__new__(
        websocket_protocol.HubWebSocketProtocol
    )
    protocol.transport, protocol.hub = transport, websocket_protocol.SocketSettings()
    protocol.hub.limit = 1024 * 1024
    calls = 100_000
    started = time.perf_counter()
    for _ in range(calls):
        protocol._written += 300  # a typical event's frame
        protocol._check_send_buffer()
    checked = (time.perf_counter() - started) / calls * 1e6
    started = time.perf_counter()
    for _ in range(calls):
        websocket_protocol.socket_unacknowledged(transport)
    syscall = (time.perf_counter() - started) / calls * 1e6
    for s in (client, peer, server):
        s.close()
    return {"send_check_us": round(checked, 3), "siocoutq_us": round(syscall, 3)}


def main() -> None:
    unversioned = asyncio.run(per_event(None))
    versioned = asyncio.run(per_event(7))
    msgpack = asyncio.run(per_event(7, binary=True))
    result = {
        "event_unversioned_us": round(unversioned, 3),
        "event_versioned_us": round(versioned, 3),
        "version_check_us": round(versioned - unversioned, 3),
        "event_messagepack_us": round(msgpack, 3),
        **send_check(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
