"""Daphne's side of the server seam (hub/transports/server.py): the ServerControls of a
WebSocket (DaphneSocket, over HubWebSocketProtocol) and of an HTTP request
(DaphneStream, over HubWebRequest), attached to each connection's scope by Daphne's
application factory (hub/daphne/server.py). The transports see only these methods; what
they drive (the send bound, Pings taken, the Close for an oversized frame, eager writes)
is in websocket_protocol.py and web_request.py."""

from collections.abc import Callable

from messenger_realtime.hub.daphne.web_request import HubWebRequest
from messenger_realtime.hub.daphne.websocket_protocol import (
    HubWebSocketProtocol,
    SocketSettings,
    socket_unacknowledged,
    twisted_unsent,
)
from messenger_realtime.hub.protocols.base import Frame


class DaphneSocket:
    """A hub WebSocket's controls under Daphne: frames go straight to its protocol."""

    __slots__ = ("_protocol", "_settings")

    def __init__(self, protocol: HubWebSocketProtocol) -> None:
        self._protocol = protocol
        self._settings = protocol.hub = SocketSettings()  # what the socket reads from us

    def write_now(self, frame: Frame) -> bool:
        protocol = self._protocol
        if protocol.state == protocol.STATE_OPEN:  # as Daphne's own send: open or nothing
            if isinstance(frame, str):
                protocol.sendMessage(frame.encode(), False)
            else:
                protocol.sendMessage(frame, True)
        return True

    def bound(self, limit: int, overflow: Callable[[int], None]) -> None:
        self._settings.limit, self._settings.overflow = limit, overflow

    def unsent(self) -> int:
        transport = self._protocol.transport
        return twisted_unsent(transport) + socket_unacknowledged(transport)

    def use_binary(self, binary: bool) -> None:
        self._settings.binary = binary

    def take_pings(self, heard: Callable[[], None]) -> bool:
        self._settings.heard = heard
        return True

    def close_after_writes(self) -> bool:
        return False  # ASGI's websocket.close, after the frames already written

    def stop_reading(self) -> bool:
        # Not resumed by its input queue again (HubWebSocketProtocol.resume_reading); the
        # Close frame Autobahn sends next is answered by nobody it reads, and its
        # close-handshake timeout (1 s) drops the connection.
        self._settings.deaf = True
        self._protocol.pause_reading()
        return True


class DaphneStream:
    """An HTTP request's controls under Daphne: the send bound of an event stream; its
    body goes through ASGI."""

    __slots__ = ("_request",)

    def __init__(self, request: HubWebRequest) -> None:
        self._request = request

    def write_now(self, frame: Frame) -> bool:
        return False

    def bound(self, limit: int, overflow: Callable[[int], None]) -> None:
        self._request.send_limit = limit
        self._request.hub_overflow = overflow

    def unsent(self) -> int:
        return self._request.unsent()

    def use_binary(self, binary: bool) -> None:
        """Bodies are bytes either way; Daphne writes nothing of its own here."""

    def take_pings(self, heard: Callable[[], None]) -> bool:
        return False  # they come in POSTs, to the application

    def close_after_writes(self) -> bool:
        return False  # the application ends the response (its last body message)

    def stop_reading(self) -> bool:
        return False  # POSTs are read by their own requests
