"""The hub's HTTP endpoint (`/hubs/messenger?id=<connectionToken>`): Server-Sent Events
and long polling, as ASP.NET Core's HttpConnectionDispatcher answers them.

- GET with `Accept: text/event-stream`: the event stream (sse.py); other GETs: a poll
  (longpolling.py). The first GET with a fresh token opens the connection.
- POST: what the client sends (any number of messages, as one body).
- DELETE: ends a long-polling connection (202).
Every request authenticates as the WebSocket does (credentials/request.py) and must be
the connection's user. Errors are the protocol's: 400 `Connection ID required`, 404 `No
Connection with that ID` (unknown, ended, another user's token, or a connection held by
another hub process: route by `id`, docs/hub.md), 400 `Cannot change transports
mid-connection`, 409 for a second event stream, 405 for POST on a WebSocket connection,
401 for bad credentials.
"""

import asyncio
from typing import Any

from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.conf.settings import HubOptions, load_hub_options
from messenger_realtime.exceptions import InvalidToken, TooManyConnections
from messenger_realtime.hub import user_connections
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.credentials import tokens
from messenger_realtime.hub.credentials.request import cors_headers, identify_scope, query_of
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols.base import message_too_big
from messenger_realtime.hub.transports import opening, sse
from messenger_realtime.hub.transports.base import (
    LONG_POLLING,
    SERVER_SENT_EVENTS,
    WEBSOCKETS,
)
from messenger_realtime.hub.transports.longpolling import NO_CACHE, LongPollingTransport
from messenger_realtime.hub.transports.server import controls_of
from messenger_realtime.ops.logging import get_logger
from messenger_realtime.ops.webhealth import layer_verdict

logger = get_logger(__name__)
POST_LIMIT_MESSAGES = 16  # a POST body may batch messages: up to this many at the limit
NOT_FOUND = "No Connection with that ID"
TEXT = [(b"content-type", b"text/plain")]


class HubHttpConsumer(AsyncConsumer):  # type: ignore[misc]
    channel_layer_alias = "messenger_realtime.hub.none"  # the connection has the channel

    def __init__(self, hub: HubProcess) -> None:
        self.hub = hub  # the process it serves (hub/process.py)
        self.chunks: list[bytes] = []
        self.size, self.responded = 0, False
        self.on_gone: Any = None  # what to tell when the client goes (poll, stream)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As Channels' own, minus the close_old_connections() thread hop per message."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def http_request(self, message: dict[str, Any]) -> None:
        self.options = load_hub_options()
        self.size += len(message.get("body", b""))
        if self.size <= self.options.max_message_size * POST_LIMIT_MESSAGES:
            self.chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            await self.handle(b"".join(self.chunks))
        # No StopConsumer here: a held poll or an event stream answers later. Daphne's
        # http.disconnect (after the response, or when the client goes) ends this one.

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        if self.on_gone is not None:
            await self.on_gone()
        raise StopConsumer

    def overflowed(self, unsent: int) -> None:
        """The server's controls: this event stream's unsent data passed SEND_BUFFER_LIMIT."""
        connection = getattr(self, "connection", None)
        if connection is not None:
            self.hub.keep(asyncio.ensure_future(connection.send_overflow(unsent)))

    async def respond(
        self, status: int, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        if self.responded:
            return
        self.responded = True
        self.on_gone = None
        start = {"type": "http.response.start", "status": status}
        await self.send({**start, "headers": [*(headers or TEXT), *self._cors()]})
        await self.send({"type": "http.response.body", "body": body})

    async def handle(self, body: bytes) -> None:
        method, options = self.scope["method"], self.options
        if method == "OPTIONS":
            await self.respond(204, headers=[(b"access-control-max-age", b"600")])
            return
        if method not in ("GET", "POST", "DELETE"):
            await self.respond(405, headers=[*TEXT, (b"allow", b"GET, POST, DELETE, OPTIONS")])
            return
        ids = query_of(self.scope).get("id")
        if not ids:
            await self.respond(400, b"Connection ID required")
            return
        try:
            identity, _ = await identify_scope(self.scope, options, lookup=False)
        except InvalidToken as exc:
            renewed = self._renewed(ids[0], options)
            if renewed is None:
                logger.info("hub request refused", extra={"action": "refused", "reason": str(exc)})
                www = (b"www-authenticate", b'Bearer realm="messenger"')
                await self.respond(401, f"Unauthorized: {exc}".encode(), [*TEXT, www])
                return
            identity = renewed
        try:
            _, connection = opening.find(self.hub, ids[0], identity.user_id)
        except InvalidToken as exc:
            logger.info("hub request refused", extra={"action": "refused", "reason": str(exc)})
            await self.respond(404, NOT_FOUND.encode())
            return
        if method == "POST":
            await self._post(connection, body)
        elif method == "DELETE":
            await self._delete(connection)
        elif connection is None:
            await self._open(ids[0], options)
        else:
            await self._get(connection)

    def _renewed(self, connection_token: str, options: HubOptions) -> tokens.Identity | None:
        """The identity of a request whose token expired, when the connection it names
        took that very token and was renewed since (RenewToken): the official clients
        send the token they negotiated with on every poll and POST, whatever RenewToken
        was given. Accepted only for that connection, live in this process, of the
        token's user, and only until the connection's own (renewed) expiry; None
        otherwise (the request is refused as before)."""
        token = tokens.bearer_token(dict(self.scope.get("headers", [])), query_of(self.scope))
        if token is None:
            return None
        try:
            identity = tokens.read_expired_token(token, options)
            _, connection = opening.find(self.hub, connection_token, identity.user_id)
        except InvalidToken:
            return None
        if connection is None or connection.closing or not connection.auth.took_token(token):
            return None
        if not connection.auth.holds(connection.loop.time()):
            return None  # past the connection's own expiry too: it is being closed
        return identity

    async def _open(self, connection_token: str, options: HubOptions) -> None:
        """The first GET of a fresh token: an event stream, or the first (empty) poll."""
        stream = b"text/event-stream" in dict(self.scope["headers"]).get(b"accept", b"")
        name = SERVER_SENT_EVENTS if stream else LONG_POLLING
        if name not in options.transports:
            unsupported = f"{name} transport not supported by this end point type"
            await self.respond(404, unsupported.encode())
            return
        transport: Any = (
            sse.ServerSentEventsTransport(
                self, controls_of(self.scope), options.send_buffer_limit, self.overflowed
            )
            if stream
            else LongPollingTransport(options, self.hub.forget)
        )
        try:
            if not self.hub.accepting:
                raise InvalidToken("shutting down")
            identity, token = await identify_scope(self.scope, options, lookup=False)
            self.connection = await opening.new_connection(
                self.hub,
                connection_token=connection_token,
                identity=identity,
                token=token,
                options=options,
                transport=transport,
            )
        except TooManyConnections as exc:
            logger.info("hub connection refused", extra={"action": "refused", "reason": str(exc)})
            retry = (b"retry-after", str(user_connections.RETRY_AFTER).encode())
            await self.respond(429, f"Too many requests: {exc}".encode(), [*TEXT, retry])
            return
        except InvalidToken as exc:
            logger.info("hub connection refused", extra={"action": "refused", "reason": str(exc)})
            await self.respond(404, NOT_FOUND.encode())
            return
        except opening.LAYER_UNREACHABLE as exc:  # logged once per outage, not per connect
            layer_verdict().noted(exc)
            unreachable = b"Service unavailable: the hub cannot reach its channel layer (Redis)"
            await self.respond(503, unreachable, [*TEXT, (b"retry-after", b"5")])
            return
        # Registered before the client hears back: its next request (the handshake's
        # POST) finds the connection.
        await self.hub.open(self.connection)
        if stream:
            await self._stream(transport)
        else:
            transport.connection = self.connection
            await self.respond(200, headers=[*NO_CACHE, (b"content-length", b"0")])

    async def _stream(self, transport: sse.ServerSentEventsTransport) -> None:
        self.responded = True
        start = {"type": "http.response.start", "status": 200}
        await self.send({**start, "headers": [*sse.HEADERS, *self._cors()]})
        await self.send_body(sse.OPENING, more_body=True)
        connection = self.connection

        async def gone() -> None:
            await connection.transport_lost(transport)

        self.on_gone = gone

    async def _get(self, connection: HubConnection) -> None:
        """A poll (or a second event stream) for a connection that is open here."""
        stream = b"text/event-stream" in dict(self.scope["headers"]).get(b"accept", b"")
        transport = connection.transport
        if transport is None or transport.name != (SERVER_SENT_EVENTS if stream else LONG_POLLING):
            await self.respond(400, b"Cannot change transports mid-connection")
        elif stream:
            await self.respond(409)
        else:
            assert isinstance(transport, LongPollingTransport)  # the only one of its name
            self.on_gone = self._poll_gone(transport)
            await transport.take_poll(self)

    def _poll_gone(self, transport: LongPollingTransport) -> Any:
        async def gone() -> None:
            transport.poll_gone(self)

        return gone

    async def _post(self, connection: HubConnection | None, body: bytes) -> None:
        transport = connection.transport if connection is not None else None
        if connection is None or connection.closing or transport is None:
            await self.respond(404, NOT_FOUND.encode())
        elif transport.name == WEBSOCKETS:
            await self.respond(405, b"POST requests are not allowed for WebSocket connections.")
        elif self.size > self.options.max_message_size * POST_LIMIT_MESSAGES:
            await self.respond(413, b"Request body too large")
            await connection.end(ending.error(message_too_big(self.options.max_message_size)))
        else:
            turns = connection.receive_turns()
            if turns.full():  # a client sending in parallel: refused, not queued
                busy = b"Too many requests: one send at a time per connection"
                await self.respond(429, busy, [*TEXT, (b"retry-after", b"1")])
                return
            async with turns.turn():
                await connection.receive(body)
            await self.respond(200)

    async def _delete(self, connection: HubConnection | None) -> None:
        transport = connection.transport if connection is not None else None
        if connection is None or transport is None:
            await self.respond(404, NOT_FOUND.encode())
        elif transport.name != LONG_POLLING:
            await self.respond(400, b"Cannot terminate this connection using the DELETE endpoint.")
        else:
            assert isinstance(transport, LongPollingTransport)  # the only one of its name
            transport.terminate()
            await connection.end(ending.RELEASED)  # the transport closes next
            await transport.close()
            await self.respond(202)

    async def send_body(self, body: bytes, *, more_body: bool = False) -> None:
        await self.send({"type": "http.response.body", "body": body, "more_body": more_body})

    def _cors(self) -> list[tuple[bytes, bytes]]:
        return cors_headers(self.scope, load_hub_options(), b"GET, POST, DELETE, OPTIONS")
