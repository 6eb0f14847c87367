"""What a logical connection needs from the transport that carries it."""

from collections.abc import Callable
from typing import Protocol

from messenger_realtime.hub.protocols.base import Frame

WEBSOCKETS, SERVER_SENT_EVENTS, LONG_POLLING = "WebSockets", "ServerSentEvents", "LongPolling"


class Transport(Protocol):
    name: str  # WEBSOCKETS, SERVER_SENT_EVENTS or LONG_POLLING
    binary_ok: bool  # can carry the MessagePack protocol
    inherent_keepalive: bool  # liveness comes from the transport: no pings, no client timeout

    async def send(self, frame: Frame) -> None:
        """Deliver one message (or queue it for the next poll)."""
        ...

    def send_now(self, frame: Frame) -> bool:
        """From code that cannot wait (the clock's pings and Acks): write one message at
        once where the transport can (a WebSocket under Daphne); False when it cannot,
        and the caller sends it in a task."""
        ...

    def take_pings(self, heard: Callable[[], None]) -> None:
        """Take the client's Pings here, where the transport can (a WebSocket under
        Daphne), calling `heard` for each; elsewhere nothing (they reach receive())."""
        ...

    def unsent(self) -> int:
        """Bytes sent and not yet taken by the client, as well as the server knows (what
        decides whether a volatile message, such as a typing indicator, goes out)."""
        ...

    async def close(self, *, drop: bool = False) -> None:
        """End the physical connection after what was sent (the hub's Close included);
        `drop`: read nothing more of it meanwhile, where the transport can (a client
        that floods the connection: no closing handshake)."""
        ...

    def use_binary(self, binary: bool) -> None:
        """The handshake chose a binary protocol (or not)."""
        ...

    def idle_since(self) -> float | None:
        """Loop time since which the client has not been reachable (long polling: no poll
        pending), or None."""
        ...

    def lingers(self) -> bool:
        """Whether the ended connection must stay findable to hand over its last output."""
        ...
