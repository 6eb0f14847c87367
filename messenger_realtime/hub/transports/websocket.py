"""The hub over WebSockets: an ASGI consumer per socket, carrying a logical connection.

The consumer authenticates the upgrade, then either opens a new logical connection
(hub/connection/) or, for a stateful reconnect, resumes the one its connection token
names (hub/connection/stateful.py); a refused upgrade is answered 403 before accept. It has no
channel of its own: the logical connection owns the channel and the groups, so it can
outlive this socket.
"""

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.auth import Identity, check_standing
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols.base import Frame
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.hub.transports import opening
from messenger_realtime.hub.transports.base import WEBSOCKETS
from messenger_realtime.hub.transports.credentials import identify_scope, query_of
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field
from messenger_realtime.ops.webhealth import layer_verdict

logger = logging.getLogger(__name__)
_check_standing = hub_read(check_standing)
ABNORMAL_CLOSURE = 1006  # the TCP connection went without a close frame: resumable
HUB_STATE = "hub.state"  # a dict Daphne's protocol shares with the hub (hub/daphne/server.py)
HUB_SOCKET = "hub.socket"  # Daphne's WebSocket protocol itself, when served by Daphne


class WebSocketTransport:
    """One WebSocket as a logical connection's transport."""

    name = WEBSOCKETS
    binary_ok = True
    inherent_keepalive = False

    def __init__(self, consumer: "HubConsumer") -> None:
        self.consumer = consumer
        self._send = consumer.base_send
        self._socket = consumer.scope.get(HUB_SOCKET)

    async def send(self, frame: Frame) -> None:
        if self._socket is not None:
            self.send_now(frame)
            return
        if isinstance(frame, str):
            await self._send({"type": "websocket.send", "text": frame})
        else:
            await self._send({"type": "websocket.send", "bytes": frame})

    def send_now(self, frame: Frame) -> bool:
        """Under Daphne, straight to its protocol, without waiting: the ASGI send would
        pass each frame through Channels' session middleware, Daphne's server and the
        protocol's message checks first, a fifth of the hub's CPU per delivery. A socket
        that is no longer open takes nothing, as Daphne's own send does. Elsewhere (a
        test's ASGI server) False: the caller sends it in a task."""
        socket = self._socket
        if socket is None:
            return False
        if socket.state == socket.STATE_OPEN:
            if isinstance(frame, str):
                socket.sendMessage(frame.encode(), False)
            else:
                socket.sendMessage(frame, True)
        return True

    async def close(self) -> None:
        # 1000: Autobahn refuses 1001 from the application; a Close message has already
        # said whether to reconnect.
        await self._send({"type": "websocket.close"})

    def use_binary(self, binary: bool) -> None:
        """Tell Daphne's protocol, for the Close it writes itself (oversized frames)."""
        state = self.consumer.scope.get(HUB_STATE)
        if state is not None:
            state["binary"] = binary

    def take_pings(self, heard: Callable[[], None]) -> None:
        """Under Daphne, the socket's protocol takes the client's Pings itself and calls
        `heard` (daphne/websocket.py): no trip through the application queue and the parser."""
        state = self.consumer.scope.get(HUB_STATE)
        if state is not None and self._socket is not None:
            state["heard"] = heard

    def idle_since(self) -> float | None:
        return None

    def lingers(self) -> bool:
        return False


class HubConsumer(AsyncConsumer):  # type: ignore[misc]
    channel_layer = None  # no channel: the connection's inbox has what the layer brings
    connection: HubConnection | None = None
    transport: WebSocketTransport | None = None

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
        # The scope's headers, query and the rest are read here, once: the connection
        # keeps only the two keys it reads later (its Daphne socket and shared state).
        scope = self.scope
        self.scope = {key: scope[key] for key in (HUB_SOCKET, HUB_STATE) if key in scope}
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

    async def hub_send_overflow(self, message: dict[str, Any]) -> None:
        """Daphne: this socket's unsent data passed SEND_BUFFER_LIMIT (daphne/websocket.py)."""
        if self.connection is not None and self.connection.transport is self.transport:
            await self.connection.send_overflow(message.get("unsent"))
