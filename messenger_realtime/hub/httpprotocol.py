"""Daphne's HTTP request with the hub's send bound for Server-Sent Events streams
(installed by hub/daphne.py).

An event stream is one response that never ends; a client that stops reading would let
Twisted buffer it without limit. Before each chunk of a stream the hub asked to bound
(`hub_state["send_limit"]`, set by the SSE transport), the connection's unsent bytes
(Twisted's write buffer plus, on Linux, the socket's unacknowledged bytes) are compared
with the limit; past it the application gets one `hub.send_overflow` message and the
connection is closed with allowReconnect, as on WebSockets (wsprotocol.py). Other
responses are untouched.

A request that upgrades to a WebSocket hands its TCP transport over, but Twisted's idle
timeout of the HTTP channel it came on (a minute) stays armed, a timer that holds the
channel for nothing and would fire on a channel without a transport: the upgrade
cancels it (`process`).
"""

from typing import Any

from daphne.http_protocol import WebRequest

from messenger_realtime.hub.wsprotocol import (
    OVERFLOW_EVENT,
    socket_unacknowledged,
    twisted_unsent,
)


class HubWebRequest(WebRequest):  # type: ignore[misc]
    hub_state: dict[str, Any] = {}  # replaced per request (hub/daphne.py)
    overflowed = False

    def process(self) -> None:
        channel = self.channel
        super().process()
        if channel is not None and channel.transport is None:  # upgraded: handed over
            channel.setTimeout(None)

    def handle_reply(self, message: dict[str, Any]) -> None:
        limit = self.hub_state.get("send_limit")
        if limit and not self.overflowed and message.get("more_body"):
            self._check_send_buffer(int(limit))
        super().handle_reply(message)

    def _check_send_buffer(self, limit: int) -> None:
        channel = getattr(self, "channel", None)
        transport = getattr(channel, "transport", None)
        if transport is None:
            return
        unsent = twisted_unsent(transport) + socket_unacknowledged(transport)
        if unsent > limit:
            self.overflowed = True
            queue = getattr(self, "application_queue", None)
            if queue is not None:
                queue.put_nowait({"type": OVERFLOW_EVENT, "unsent": unsent})
