"""Server-Sent Events: one long GET response carries what a connection sends, each message
as one event; POSTs carry what the client sends (transports/http.py). Text only (JSON).

The response starts with a comment line (":"), which makes the client's EventSource
open; each message follows as `data: <record>` and a blank line. When the connection
ends the response ends; when the client goes away the connection ends (no resume).
Keep-alive pings flow both ways as on WebSockets. The stream's unsent bytes are bounded
by SEND_BUFFER_LIMIT through the server's controls (transports/server.py): Daphne's
(hub/daphne/web_request.py), or on a plain ASGI server the hub's own buffer (plain_asgi.py).
"""

from collections.abc import Callable
from typing import Any

from messenger_realtime.hub.protocols.base import Frame
from messenger_realtime.hub.transports.base import SERVER_SENT_EVENTS
from messenger_realtime.hub.transports.plain_asgi import PlainAsgiControls
from messenger_realtime.hub.transports.server import ServerControls

HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-store"),
    (b"pragma", b"no-cache"),
    (b"content-encoding", b"identity"),
    (b"x-accel-buffering", b"no"),  # proxies must not hold events back
]
OPENING = b":\r\n"


def event(frame: Frame) -> bytes:
    """One message as an event: a `data:` line per line of it, then a blank line."""
    text = frame if isinstance(frame, str) else frame.decode()
    if "\n" not in text and "\r" not in text:  # always so for JSON records
        return b"data: " + text.encode() + b"\r\n\r\n"
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return b"".join(b"data: " + line.encode() + b"\r\n" for line in lines) + b"\r\n"


class ServerSentEventsTransport:
    name = SERVER_SENT_EVENTS
    binary_ok = False
    inherent_keepalive = False

    def __init__(
        self,
        consumer: Any,
        controls: ServerControls | None,
        limit: int,
        overflow: Callable[[int], None],
    ) -> None:
        """`controls`: the server's of this response (None: a plain ASGI server, whose
        writes the hub buffers itself); past `limit` unsent bytes, `overflow(unsent)`."""
        self.consumer = consumer
        self.ended = False
        if controls is None:

            async def deliver(chunk: Frame) -> None:
                await consumer.send_body(chunk, more_body=True)

            async def finish() -> None:
                await consumer.send_body(b"", more_body=False)

            controls = PlainAsgiControls(deliver, finish)
        controls.bound(limit, overflow)
        self.controls = controls

    async def send(self, frame: Frame) -> None:
        if not self.ended:
            chunk = event(frame)
            if not self.controls.write_now(chunk):
                await self.consumer.send_body(chunk, more_body=True)

    def unsent(self) -> int:
        return self.controls.unsent()

    async def close(self, *, drop: bool = False) -> None:
        if not self.ended:
            self.ended = True
            if not self.controls.close_after_writes():
                await self.consumer.send_body(b"", more_body=False)

    def send_now(self, frame: Frame) -> bool:
        return False  # a write waits on the response (the caller sends in a task)

    def take_pings(self, heard: Callable[[], None]) -> None:
        pass  # the client's Pings reach receive()

    def use_binary(self, binary: bool) -> None:
        """Never binary: the handshake refuses MessagePack on this transport."""

    def idle_since(self) -> float | None:
        return None

    def lingers(self) -> bool:
        return False
