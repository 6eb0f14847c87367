"""The /hubs/messenger WebSocket consumer: SignalR JSON hub protocol over Channels.

Thin by design: framing and messages live in protocol.py, credentials in auth.py, media
credentials in media.py, group names in transport/groups.py. The consumer authenticates,
speaks the handshake, joins the groups the user may receive (decided here, from the domain
port, never by the client), forwards dispatcher events and keeps the connection alive.
"""

import asyncio
import contextlib
import logging
import math
import time
import weakref
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.exceptions import HandshakeError, InvalidToken, ProtocolError
from messenger_realtime.hub import auth, protocol
from messenger_realtime.hub.groups import ConnectionGroups
from messenger_realtime.hub.invocations import HubInvocations
from messenger_realtime.hub.media import media_join
from messenger_realtime.hub.membership import ChatMemberships
from messenger_realtime.hub.timers import ConnectionTimers
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field
from messenger_realtime.uuid7 import uuid7

logger = logging.getLogger(__name__)

# Open connections of this process, for the shutdown Close (hub/daphne.py).
LIVE_CONNECTIONS: "weakref.WeakSet[HubConsumer]" = weakref.WeakSet()


class HubConsumer(
    HubInvocations,
    ConnectionGroups,
    ConnectionTimers,
    AsyncWebsocketConsumer,  # type: ignore[misc]
):
    user_id: UUID
    connection_id: str
    accepting = True  # False once this process shuts down
    closing = False  # set once the connection is being closed: nothing more is forwarded
    token: str | None = None
    expires_at = math.inf  # loop time when the credentials expire
    expiry_reason = "token expired"
    # Until the handshake, a connection is in no group; disconnect() relies on these
    # even when connect() refused it early.
    handshaken = False
    memberships = ChatMemberships()  # replaced per connection in connect()

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As Channels' own, minus the close_old_connections() it runs in a thread before
        every handler: a thread hop per delivered event, the hub's hottest path. Every
        database read here goes through database_sync_to_async, which does that itself."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        if not HubConsumer.accepting:
            await self.close()  # shutting down: the client retries elsewhere
            return
        self.options = load_hub_options()
        self.handshaken = False
        self.memberships = ChatMemberships()
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        try:
            identity = await self._authenticate(query)
            self.user_id = identity.user_id
            ids = query.get("id")
            self.connection_id = (
                auth.check_connection_token(ids[0], self.user_id, self.options.connection_token_ttl)
                if ids
                else uuid7().hex  # skipNegotiation: WebSockets straight away
            )
        except InvalidToken as exc:
            logger.info("hub connection refused", extra={"action": "refused", "reason": str(exc)})
            await self.close()  # before accept: the WebSocket upgrade is refused
            return
        await self.accept()
        metrics.hub_connections.inc()
        self.accepted = True
        self.records = protocol.RecordBuffer(self.options.max_message_size)
        self.loop = asyncio.get_running_loop()
        self.opened_at = self.last_received = self.last_sent = self.loop.time()
        if identity.expires_at is not None:  # nothing is forwarded from then on
            self.expires_at = self.opened_at + identity.expires_at - time.time()
            self.expiry_reason = "token expired" if self.token else "session expired"
        self.watchdog = asyncio.create_task(self._watch())
        LIVE_CONNECTIONS.add(self)

    async def _authenticate(self, query: dict[str, list[str]]) -> auth.Identity:
        headers = dict(self.scope.get("headers", []))
        self.token = token = auth.bearer_token(headers, query)
        user = self.scope.get("user")  # the Django session (the project's own pages)
        session = token is None and user is not None and user.is_authenticated
        if session and not self._same_site(headers):
            # A cookie rides along with any page's WebSocket: only our own pages (or
            # configured origins) may use the session (cross-site WebSocket hijacking).
            raise InvalidToken("origin not allowed for session authentication")
        identity: auth.Identity = await database_sync_to_async(auth.identify)(
            token, user, self.options, self.scope.get("session") if session else None
        )
        return identity

    def _same_site(self, headers: dict[bytes, bytes]) -> bool:
        origin = headers.get(b"origin", b"").decode("latin-1")
        if not origin:
            return True  # not a browser: no ambient cookie to abuse
        host = headers.get(b"host", b"").decode("latin-1")
        scheme = str(self.scope.get("scheme") or "ws")  # Daphne: from hub/wsprotocol.py
        return auth.same_origin(origin, scheme, host) or origin in self.options.cors_allowed_origins

    async def disconnect(self, code: int) -> None:
        LIVE_CONNECTIONS.discard(self)
        if getattr(self, "accepted", False):
            self.accepted = False
            metrics.hub_connections.dec()
            metrics.hub_disconnects.inc()
        watchdog = getattr(self, "watchdog", None)
        if watchdog is not None:
            watchdog.cancel()
        if self.handshaken:
            for group in self._layer_groups(self.chats):
                await self.channel_layer.group_discard(group, self.channel_name)

    # -- client -> server -------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        self.last_received = now = self.loop.time()
        if self.closing:
            return
        if now >= self.expires_at:
            await self._drop(self.expiry_reason)
            return
        try:
            data = text_data if text_data is not None else (bytes_data or b"").decode("utf-8")
            records = self.records.feed(data)
        except (UnicodeDecodeError, ProtocolError) as exc:
            await self._close_with_error(_reason(exc))
            return
        for record in records:
            if not self.handshaken:
                if not await self._handshake(record):
                    return
                continue
            try:
                message = protocol.parse_message(record)
            except ProtocolError as exc:
                await self._close_with_error(_reason(exc))
                return
            if not await self._handle(message):
                return

    async def _handshake(self, record: str) -> bool:
        try:
            protocol.parse_handshake(record)
        except HandshakeError as exc:
            await self.send(protocol.handshake_error(str(exc)))
            await self.close()
            return False
        # Join before answering: events queue behind this handler, so the client never
        # sees one before its handshake response.
        await self._sync_groups()
        self.handshaken = True
        await self._send(protocol.HANDSHAKE_OK)
        logger.info(
            "hub connected",
            extra={
                "action": "connected",
                Field.CONNECTION_ID: self.connection_id,
                Field.USER_ID: self.user_id,
                "chats": len(self.chats),
            },
        )
        return True

    # -- server -> client (channel layer handlers) ----------------------------------

    async def realtime_event(self, message: dict[str, Any]) -> None:
        """A dispatcher event for one of this connection's groups."""
        if self.closing or self.loop.time() >= self.expires_at:
            await self._drop(self.expiry_reason)  # no event once the credentials expired
            return
        chat = message.get("chat")
        if chat is not None:
            # The hot path inline (a lookup and a comparison); anything else, such as a
            # version newer than this connection's read, is for _deliverable().
            version, held = message.get("membership_version"), self.memberships.held.get(chat)
            if (held is None or (version is not None and version > held)) and not (
                await self._deliverable(chat, version)
            ):
                return
        elif message["event"] == "chat_updated":
            # This user's memberships may have changed: re-read them first, so a client
            # that sees the event finds its groups already rebuilt.
            await self._sync_groups()
        payload = message["payload"]
        if message.get("per_recipient") and "media" in payload:
            # Minted here, per recipient, at delivery: never stored, queued or logged.
            room = payload["media"]["roomName"]
            payload = {**payload, "media": media_join(room, self.user_id, self.options)}
        await self._send(protocol.invocation(message["event"], [payload]))

    async def realtime_membership(self, message: dict[str, Any]) -> None:
        """The user's chat memberships changed: rebuild the chat groups from the domain."""
        await self._sync_groups()

    async def realtime_disconnect(self, message: dict[str, Any]) -> None:
        """Ops asked this user's connections to reconnect (see control.disconnect_user)."""
        await self.shutdown()

    async def realtime_overrun(self, message: dict[str, Any]) -> None:
        """The channel layer dropped a message meant for this connection (transport/layer.py)."""
        await self._drop(OVERRUN)

    async def hub_send_overflow(self, message: dict[str, Any]) -> None:
        """Daphne: the connection's unsent data passed SEND_BUFFER_LIMIT (wsprotocol.py)."""
        await self._drop("send buffer over SEND_BUFFER_LIMIT", unsent=message.get("unsent"))

    # -- helpers ----------------------------------------------------------------

    async def _send(self, text: str) -> None:
        self.last_sent = self.loop.time()
        await self.send(text_data=text)

    async def _close_with_error(self, reason: str, *, allow_reconnect: bool = False) -> None:
        extra = {"action": "close", "reason": reason, Field.CONNECTION_ID: self.connection_id}
        logger.info("hub connection closed", extra={**extra, Field.USER_ID: self.user_id})
        with contextlib.suppress(Exception):
            await self._send(protocol.close(reason, allow_reconnect=allow_reconnect))
        await self.close()

    async def _drop(self, reason: str, **fields: Any) -> None:
        """Close with allowReconnect, once: the client reconnects (authenticating again)
        and resyncs over REST. Logged with the connection's ids, never a payload."""
        if self.closing:
            return
        self.closing = True
        metrics.hub_forced_closes.labels(reason=_REASONS.get(reason, "other")).inc()
        extra: dict[str, Any] = {"action": "close", "reason": reason, **fields}
        extra.update({Field.CONNECTION_ID: self.connection_id, Field.USER_ID: self.user_id})
        logger.info("hub connection closed", extra=extra)
        await self.shutdown()

    async def shutdown(self) -> None:
        """Close, telling the client to reconnect (server shutdown, or ops' request)."""
        with contextlib.suppress(Exception):  # the socket may be gone already
            await self._send(protocol.close(allow_reconnect=True))
            # 1000: Autobahn refuses 1001 from the application; the Close message above
            # already says "reconnect".
            await self.close()


OVERRUN = "events dropped (channel layer overrun)"
# Bounded label values of messenger_realtime_hub_forced_closes_total.
_REASONS = {
    "token expired": "expired",
    "session expired": "expired",
    "send buffer over SEND_BUFFER_LIMIT": "send_buffer",
    OVERRUN: "overrun",
}


def _reason(exc: Exception) -> str:
    detail = str(exc) if isinstance(exc, ProtocolError) else "Invalid UTF-8 in a text message."
    return f"Connection closed with an error. InvalidDataException: {detail}"
