"""The hub over WebSockets: an ASGI consumer per socket, carrying a logical connection.

The consumer authenticates the upgrade, then either opens a new logical connection
(hub/connection/) or, for a stateful reconnect, resumes the one its connection token
names (hub/connection/stateful.py); a refused upgrade is answered 403 before accept. It has no
channel of its own: the logical connection owns the channel and the groups, so it can
outlive this socket.
"""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.credentials.request import identify_scope, query_of
from messenger_realtime.hub.credentials.tokens import Identity, check_standing
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols.base import Frame
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.hub.transports import opening
from messenger_realtime.hub.transports.base import WEBSOCKETS
from messenger_realtime.hub.transports.plain_asgi import PlainAsgiControls
from messenger_realtime.hub.transports.server import ServerControls, controls_of
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger
from messenger_realtime.ops.webhealth import layer_verdict

logger = get_logger(__name__)
_check_standing = hub_read(check_standing)
ABNORMAL_CLOSURE = 1006  # the TCP connection went without a close frame: resumable


class WebSocketTransport:
    """One WebSocket as a logical connection's transport, written through the server's
    controls (transports/server.py): Daphne's, or the hub's own over plain ASGI."""

    name = WEBSOCKETS
    binary_ok = True
    inherent_keepalive = False

    def __init__(self, consumer: "HubConsumer") -> None:
        self.consumer = consumer
        self._send = consumer.base_send
        controls = consumer.controls or PlainAsgiControls.websocket(consumer.base_send)
        controls.bound(load_hub_options().send_buffer_limit, self._overflowed)
        self.controls: ServerControls = controls

    async def send(self, frame: Frame) -> None:
        if self.send_now(frame):
            return
        if isinstance(frame, str):
            await self._send({"type": "websocket.send", "text": frame})
        else:
            await self._send({"type": "websocket.send", "bytes": frame})

    def send_now(self, frame: Frame) -> bool:
        """Straight to the server's controls, without waiting. Under Daphne the ASGI send
        would pass each frame through Channels' session middleware, Daphne's server and
        the protocol's message checks first, a fifth of the hub's CPU per delivery; on a
        plain ASGI server the hub's own bounded buffer takes it (transports/plain_asgi.py).
        A socket that is no longer open takes nothing, as ASGI's send."""
        return self.controls.write_now(frame)

    def unsent(self) -> int:
        return self.controls.unsent()

    async def close(self, *, drop: bool = False) -> None:
        # 1000: Autobahn refuses 1001 from the application; a Close message has already
        # said whether to reconnect.
        if drop:
            self.controls.stop_reading()
        if not self.controls.close_after_writes():
            await self._send({"type": "websocket.close"})

    def use_binary(self, binary: bool) -> None:
        """Tell the server, for the Close it writes itself (oversized frames, Daphne)."""
        self.controls.use_binary(binary)

    def take_pings(self, heard: Callable[[], None]) -> None:
        """Where the server can (Daphne: daphne/websocket_protocol.py), it takes the
        client's Pings itself and calls `heard`: no trip through the application queue and
        the parser."""
        self.controls.take_pings(heard)

    def _overflowed(self, unsent: int) -> None:
        """The server's controls: this socket's unsent data passed SEND_BUFFER_LIMIT."""
        connection = self.consumer.connection
        if connection is not None and connection.transport is self:
            self.consumer.hub.keep(asyncio.ensure_future(connection.send_overflow(unsent)))

    def idle_since(self) -> float | None:
        return None

    def lingers(self) -> bool:
        return False


class HubConsumer(AsyncConsumer):  # type: ignore[misc]
    channel_layer = None  # no channel: the connection's inbox has what the layer brings
    connection: HubConnection | None = None
    transport: WebSocketTransport | None = None
    controls: ServerControls | None = None  # the server's, if it gives any (server.py)

    def __init__(self, hub: HubProcess) -> None:
        self.hub = hub  # the process it serves (hub/process.py)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """As Channels' AsyncConsumer, which has no channel here: one loop over what the
        socket brings, where Channels' await_many_dispatch makes a task and an
        asyncio.wait per message (every ping of every idle connection)."""
        self.scope, self.base_send = scope, send
        del scope  # websocket_connect keeps only what the hub reads later (this frame lives on)
        try:
            while True:
                await self.dispatch(await receive())
        except StopConsumer:
            pass

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As Channels' own, minus the close_old_connections() thread hop per message."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def websocket_connect(self, message: dict[str, Any]) -> None:
        # The scope's headers, query and the rest are read here, once: the consumer
        # keeps only what it needs later, the server's controls of this socket.
        scope = self.scope
        self.controls, self.scope = controls_of(scope), {}
        if not self.hub.accepting:
            await self._refuse("shutting down")  # the client retries elsewhere
            return
        options = load_hub_options()
        ids = query_of(scope).get("id")
        try:
            # The token's signature and claims here; the user's standing is read with
            # the connection's chats (admit) or, for a resume, on its own.
            identity, token = await identify_scope(scope, options, lookup=False)
            existing = opening.find(self.hub, ids[0], identity.user_id)[1] if ids else None
            if existing is not None:
                await _check_standing(identity, token)
                await self._resume(existing, identity, token)
                return
            transport = WebSocketTransport(self)
            connection = await opening.new_connection(
                self.hub,
                connection_token=ids[0] if ids else None,
                identity=identity,
                token=token,
                options=options,
                transport=transport,
            )
        except InvalidToken as exc:
            await self._refuse(str(exc))
            return
        except opening.LAYER_UNREACHABLE as exc:  # logged once per outage, not per connect
            layer_verdict().noted(exc)
            await self.base_send({"type": "websocket.close"})
            return
        await self.base_send({"type": "websocket.accept"})
        self.connection, self.transport = connection, transport
        await self.hub.open(connection)

    async def _resume(
        self, connection: HubConnection, identity: Identity, token: str | None
    ) -> None:
        why = connection.resumable_by(identity.user_id)
        if why is not None:
            metrics.hub_resumes.labels(outcome="refused").inc()
            await self._refuse(why, connection_id=connection.connection_id)
            return
        await self.base_send({"type": "websocket.accept"})
        self.connection, self.transport = connection, WebSocketTransport(self)
        metrics.hub_resumes.labels(outcome="resumed").inc()
        await connection.resume(self.transport, identity, token)

    async def _refuse(self, reason: str, **fields: Any) -> None:
        """Before accept: Daphne answers the upgrade with 403 (any refusal is alike to
        the clients: a resume refused makes them start afresh)."""
        extra = {"action": "refused", "reason": reason}
        if "connection_id" in fields:
            extra[Field.CONNECTION_ID] = fields["connection_id"]
        logger.info("hub connection refused", extra=extra)
        await self.base_send({"type": "websocket.close"})

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        if self.connection is not None and self.connection.transport is self.transport:
            text = message.get("text")
            await self.connection.receive(text if text is not None else message.get("bytes", b""))

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self.connection is not None and self.transport is not None:
            resumable = message.get("code") == ABNORMAL_CLOSURE
            with contextlib.suppress(Exception):
                await self.connection.transport_lost(self.transport, resumable=resumable)
        raise StopConsumer
