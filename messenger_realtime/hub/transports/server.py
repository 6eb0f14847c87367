"""The seam between the hub and the ASGI server that serves it: what the transports need
of the server for one connection beyond ASGI's messages, as one interface.

ASGI alone lets the hub send a message and wait; the hub needs more of the server that
holds a socket: to write a frame at once from code that cannot wait (the clock's pings
and Acks), to know how much it wrote that the peer has not taken (a client that stops
reading must cost only itself: past SEND_BUFFER_LIMIT it is closed with allowReconnect),
to let the server answer a client's Ping itself (`heard`, without the trip through the
application), to tell the server which protocol a connection speaks (the Close it
writes itself for an oversized frame), and to end the connection after what was written.
`ServerControls` is all of that; a transport talks to nothing else of the server: no
scope keys, no server objects.

A server that gives such controls puts them on each connection's scope with `attach`
(Daphne's: hub/daphne/controls.py, put there by its application factory,
hub/daphne/server.py); a transport finds them with `controls_of`. A server that gives
none (any plain ASGI server: Uvicorn, Hypercorn, a test's) gets the hub's own
implementation over standard ASGI messages and a bounded buffer (plain_asgi.py).
"""

from collections.abc import Callable
from typing import Any, Protocol

from messenger_realtime.hub.protocols.base import Frame

# The scope key under which a server attaches its controls: ASGI's place for what a
# server offers beyond the specification (its "extensions"), named after the app.
EXTENSION = "messenger_realtime.server_controls"


class ServerControls(Protocol):
    """What the hub needs of the server for one connection (a WebSocket, or the HTTP
    response of an event stream), beyond ASGI."""

    def write_now(self, frame: Frame) -> bool:
        """Write one message (text for a str, binary for bytes) without waiting, in order
        with every earlier one: True once it is the server's (a socket no longer open
        takes nothing, as ASGI's send); False where this connection cannot (an HTTP
        response: its body goes through ASGI)."""
        ...

    def bound(self, limit: int, overflow: Callable[[int], None]) -> None:
        """Past `limit` bytes written and not taken by the peer, call `overflow(unsent)`,
        once; the hub then ends the connection (with allowReconnect)."""
        ...

    def unsent(self) -> int:
        """Bytes written and not yet taken by the peer, as well as the server knows."""
        ...

    def use_binary(self, binary: bool) -> None:
        """The connection's protocol is binary (MessagePack) or not (JSON), for what the
        server writes itself (its Close for an oversized frame)."""
        ...

    def take_pings(self, heard: Callable[[], None]) -> bool:
        """Answer the client's Pings here, calling `heard` for each instead of passing
        them to the application; False where the server cannot (they reach it)."""
        ...

    def close_after_writes(self) -> bool:
        """End the connection once everything written has gone, without waiting: True
        when these controls do it; False when the application ends it through ASGI
        (what write_now wrote is the server's already, and goes first)."""
        ...

    def stop_reading(self) -> bool:
        """Read nothing more from the client, for good (a connection closed as a flood:
        its closing handshake would read on, at line rate, whatever it still sends
        until its own Close came; the server's close-handshake timeout ends it instead).
        False where the server cannot (it reads on, under its own flow control)."""
        ...


def attach(scope: dict[str, Any], controls: ServerControls) -> None:
    """The server's side: give a connection's scope its controls (before the application
    is made)."""
    scope["extensions"] = {**(scope.get("extensions") or {}), EXTENSION: controls}


def controls_of(scope: dict[str, Any]) -> ServerControls | None:
    """The controls the server attached to this scope, or None (a plain ASGI server)."""
    extensions = scope.get("extensions") or {}
    controls: ServerControls | None = extensions.get(EXTENSION)
    return controls
