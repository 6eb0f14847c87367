"""Daphne's HTTP request with the hub's send bound for Server-Sent Events streams
(installed by hub/daphne/__init__.py, install).

An event stream is one response that never ends; a client that stops reading would let
Twisted buffer it without limit. Before each chunk of a stream the hub asked to bound
(the SSE transport's `bound`, through DaphneStream in controls.py), the connection's
unsent bytes (Twisted's write buffer plus, on Linux, the socket's unacknowledged bytes)
are compared with the limit; past it the hub's `overflow` is called once and the
connection is closed with allowReconnect, as on WebSockets (daphne/websocket_protocol.py). Other
responses are untouched.

A request that upgrades to a WebSocket hands its TCP transport over, but the HTTP channel
it came on stays alive for the connection's life, and the request with it: Twisted's
idle timeout of the channel (a minute) stays armed, a timer that would fire on a channel
without a transport, and the transport keeps the channel as its registered producer
(for HTTP's flow control: pause reading while writes back up). The upgrade cancels the
one and unregisters the other (`process`), as Twisted itself does when a connection
switches to HTTP/2; the WebSocket's own send bound (daphne/websocket_protocol.py) does the flow
control from then on. Checked in a real Daphne by tests/e2e/test_upgrade_release.py.
"""

from collections.abc import Callable
from typing import Any

from daphne.http_protocol import WebRequest

from messenger_realtime.hub.daphne.websocket_protocol import socket_unacknowledged, twisted_unsent


class HubWebRequest(WebRequest):  # type: ignore[misc]
    # Set by the hub through the request's controls (controls.py) for an event stream.
    send_limit = 0
    hub_overflow: Callable[[int], None] | None = None
    overflowed = False

    def process(self) -> None:
        channel, transport = self.channel, self.transport  # the TCP transport
        super().process()
        # Daphne's upgrade takes the transport from the request (not from the channel):
        # that is the sign the connection is a WebSocket's now.
        if channel is not None and transport is not None and self.transport is None:
            channel.setTimeout(None)
            if getattr(transport, "producer", None) is channel:
                transport.unregisterProducer()

    def handle_reply(self, message: dict[str, Any]) -> None:
        limit = self.send_limit
        if limit and not self.overflowed and message.get("more_body"):
            self._check_send_buffer(limit)
        super().handle_reply(message)

    def unsent(self) -> int:
        """Bytes of its connection written and not taken by the peer (0: no transport)."""
        transport = getattr(getattr(self, "channel", None), "transport", None)
        if transport is None:
            return 0
        return twisted_unsent(transport) + socket_unacknowledged(transport)

    def _check_send_buffer(self, limit: int) -> None:
        unsent = self.unsent()
        if unsent > limit:
            self.overflowed = True
            if self.hub_overflow is not None:
                self.hub_overflow(unsent)
