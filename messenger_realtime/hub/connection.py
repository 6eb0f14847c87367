"""One logical SignalR connection, whatever transport carries it.

A HubConnection authenticates once, speaks the handshake, joins the groups the user may
receive (decided here, from the domain port, never by the client), forwards dispatcher
events and keeps itself alive. It owns its channel-layer channel and groups, so it can
outlive the physical connection: a stateful WebSocket that dropped waits for its resume
(resume.py), a long-polling connection lives between polls. Transports (transports/)
hand it what the client sent and carry what it sends; framing and messages are the
negotiated protocol's (protocols/).
"""

import asyncio
import contextlib
import logging
import time
from typing import Any
from uuid import UUID

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import (
    HandshakeError,
    HubProtocolError,
    ProtocolError,
    SequenceError,
)
from messenger_realtime.hub import admission, protocols, registry
from messenger_realtime.hub.auth import Identity
from messenger_realtime.hub.delivery import Delivery
from messenger_realtime.hub.events import OVERRUN, EventHandlers
from messenger_realtime.hub.groups import ConnectionGroups
from messenger_realtime.hub.invocations import HubInvocations
from messenger_realtime.hub.membership import ChatMemberships
from messenger_realtime.hub.protocols import handshake
from messenger_realtime.hub.protocols.base import Frame, HubProtocol
from messenger_realtime.hub.resume import REPLAY_OVERFLOW, StatefulConnection
from messenger_realtime.hub.timers import Timeouts
from messenger_realtime.hub.transports.base import Transport
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field

logger = logging.getLogger(__name__)
UNEXPECTED = "Connection closed with an error."  # ASP.NET's words when it does not say why
FIRST_MESSAGE_WAIT = 0.5  # stateful: the longest events wait for the client's first message


class HubConnection(
    Delivery,
    EventHandlers,
    StatefulConnection,
    HubInvocations,
    ConnectionGroups,
):
    protocol: HubProtocol | None = None  # chosen by the handshake

    def __init__(
        self,
        *,
        connection_id: str,
        identity: Identity,
        token: str | None,
        options: HubOptions,
        transport: Transport,
        channel_layer: Any,
        stateful_allowed: bool = False,
    ) -> None:
        self.connection_id, self.user_id = connection_id, identity.user_id
        self.session, self.session_key = identity.session, identity.session_key
        self.token, self.options, self.transport = token, options, transport
        self.channel_layer, self.stateful_allowed = channel_layer, stateful_allowed
        self.handshaken = self.closing = self.ended = False
        self.memberships = ChatMemberships()
        self.handshake_buffer = handshake.HandshakeBuffer(options.max_message_size)
        self.loop = asyncio.get_running_loop()
        self.opened_at = self.last_received = self.last_sent = self.loop.time()
        self.expires_at, self.expiry_reason = self.credentials_end(identity, token)
        self.timeouts = Timeouts(self)  # its deadlines, on the process's one clock
        self.admission = admission.opening(connection_id)  # in progress until its handshake
        self.receiving = asyncio.Lock()  # POSTs of one connection, one at a time
        self.delivery: asyncio.Task[None] | None = None
        self.unsent = []
        self.detached_at: float | None = None
        self.stateful = None

    def _pings(self) -> bool:
        """Keep-alive both ways: after the handshake, on transports without their own."""
        transport = self.transport
        return self.handshaken and transport is not None and not transport.inherent_keepalive

    def _unreachable_since(self) -> float | None:
        """Since when no transport can reach the client: a dropped stateful WebSocket,
        or a long-polling connection with no poll pending."""
        if self.detached_at is not None:
            return self.detached_at
        transport = self.transport
        return transport.idle_since() if transport is not None else None

    def credentials_end(self, identity: Identity, token: str | None) -> tuple[float, str]:
        """Loop time when these credentials expire (nothing is forwarded from then on)."""
        if identity.expires_at is None:
            return float("inf"), "session expired"
        reason = "token expired" if token else "session expired"
        return self.loop.time() + identity.expires_at - time.time(), reason

    async def open(self) -> None:
        """Register and start the clock; the transport has accepted."""
        registry.add(self.connection_id, self)
        metrics.hub_connections.inc()
        self.opened = True
        self.timeouts.start()

    # -- client -> server -------------------------------------------------------

    async def receive(self, data: Frame) -> None:
        """What the transport got from the client: a frame, or a POST body."""
        self.last_received = now = self.loop.time()
        if self.closing:
            return
        if now >= self.expires_at:
            await self._drop(self.expiry_reason)
            return
        try:
            if not self.handshaken:
                rest = await self._read_handshake(data)
                if rest is None:
                    return
                data = rest
            assert self.protocol is not None
            for message in self.protocol.parse(data):
                if not await self._receive_message(message):
                    return
        except (UnicodeDecodeError, HubProtocolError) as exc:
            await self._close_with_error(_reason(exc))
        except Exception:
            # Whatever a client's input set off, it ends that connection alone, with a
            # Close and at once (registry, groups), never a 1011 left for the clock.
            logger.exception("hub message failed", extra={**self._ids(), "action": "receive"})
            await self._close_with_error(UNEXPECTED)

    async def _receive_message(self, message: dict[str, Any]) -> bool:
        """Act on one message; False once the connection was closed."""
        if self.stateful is not None and not self._sequenced_in(message):
            return True  # an Ack, a Sequence or a duplicate: nothing more to do
        self._start_delivery()  # stateful: the client's first message after the handshake
        return await self._handle(message)

    async def _read_handshake(self, data: Frame) -> bytes | None:
        """The bytes after a successful handshake, or None (incomplete, or refused)."""
        record, rest = self.handshake_buffer.feed(data.encode() if isinstance(data, str) else data)
        transport = self.transport
        if record is None or transport is None:
            return None
        try:
            request = handshake.parse_handshake(record, binary_ok=transport.binary_ok)
        except HandshakeError as exc:
            self.closing = True
            await self._send(handshake.handshake_error(str(exc)))
            await self._finish()
            return None
        self.protocol = protocols.create(request.protocol, self.options.max_message_size)
        transport.use_binary(self.protocol.binary)
        self._choose_stateful(request.version)
        # Joined before answering (admit() at the upgrade, or here), and forwarding
        # starts only after: the client never sees an event before its handshake
        # response.
        if self.admitted:
            session_holds = not self.session_lost
        else:
            await self._sync_groups()
            # A logout's control message reaches a connection only through its user
            # group, joined just now: one sent since the upgrade authenticated this
            # connection went unheard. So read the session again, after joining (the
            # logout deletes the session before it sends: transport/control.py), and a
            # logout is never missed. (admit() reads it after joining, too.)
            session_holds = await self._session_holds()
        self.handshaken = True
        self.admission.done()
        ok = handshake.HANDSHAKE_OK
        await self._send(ok.encode() if self.protocol.binary else ok)
        if not session_holds:
            await self.end_session()
            return None
        logger.info(
            "hub connected",
            extra={
                "action": "connected",
                Field.CONNECTION_ID: self.connection_id,
                Field.USER_ID: self.user_id,
                "chats": len(self.chats),
                "transport": transport.name,
                "protocol": self.protocol.name,
                "stateful": self.stateful is not None,
            },
        )
        if self.stateful is None:
            self._start_delivery()
        else:
            # The official JavaScript client counts messages only once it has handled
            # the handshake response, and in Node a message read together with that
            # response would go uncounted (then be delivered twice after a resume).
            # It sends a Ping right after; clients that do not (.NET) wait this long.
            self.loop.call_later(FIRST_MESSAGE_WAIT, self._start_delivery)
        return rest

    # -- ending -------------------------------------------------------------------

    async def transport_lost(self, transport: Transport, *, resumable: bool = False) -> None:
        """The physical connection ended: wait for a resume if it may come, else end."""
        if transport is not self.transport:
            return  # already replaced by a resume
        self.transport = None
        if resumable and self._may_resume():
            self._detach()
            return
        await self.end()

    async def _finish(self) -> None:
        """Close the transport (after what was sent) and end the connection."""
        self.closing = True
        transport = self.transport
        if transport is not None:
            with contextlib.suppress(Exception):  # the socket may be gone already
                await transport.close()
        await self.end()

    async def end(self) -> None:
        """Release everything, once: groups, tasks, the registry entry."""
        if self.ended:
            return
        self.ended = self.closing = True
        self.timeouts.stop()
        self.admission.done()
        transport = self.transport
        if transport is None or not transport.lingers():
            registry.remove(self.connection_id, self)
        if getattr(self, "opened", False):
            metrics.hub_connections.dec()
            metrics.hub_disconnects.inc()
            logger.info("hub disconnected", extra={**self._ids(), "action": "disconnected"})
        delivery = self.delivery
        if delivery is not None and delivery is not asyncio.current_task():
            delivery.cancel()
        # Also before the handshake finished: the user group is joined before it answers.
        await self.leave_groups()

    async def _close_with_error(self, reason: str, *, allow_reconnect: bool = False) -> None:
        logger.info("hub connection closed", extra={**self._ids(), "reason": reason})
        self.closing = True  # before the Close: a resume it may prompt is refused
        close = self.protocol.close if self.protocol else protocols.JsonProtocol.close
        await self._send_close(close(reason, allow_reconnect=allow_reconnect))
        await self._finish()

    async def _drop(self, reason: str, **fields: Any) -> None:
        """Close with allowReconnect, once: the client reconnects (authenticating again)
        and resyncs over REST. Logged with the connection's ids, never a payload."""
        if self.closing:
            return
        self.closing = True
        metrics.hub_forced_closes.labels(reason=_REASONS.get(reason, "other")).inc()
        logger.info("hub connection closed", extra={**self._ids(), "reason": reason, **fields})
        await self.shutdown()

    async def shutdown(self) -> None:
        """Close, telling the client to reconnect (server shutdown, or ops' request)."""
        self.closing = True
        close = self.protocol.close if self.protocol else protocols.JsonProtocol.close
        await self._send_close(close(allow_reconnect=True))
        await self._finish()

    async def _client_closed(self) -> None:
        """The client sent Close: end without a word (no resume follows)."""
        await self._finish()

    def _ids(self) -> dict[str, Any]:
        return {
            "action": "close",
            Field.CONNECTION_ID: self.connection_id,
            Field.USER_ID: self.user_id,
        }

    def is_user(self, user_id: UUID) -> bool:
        return self.user_id == user_id


# Bounded label values of messenger_realtime_hub_forced_closes_total.
_REASONS = {
    "token expired": "expired",
    "session expired": "expired",
    "send buffer over SEND_BUFFER_LIMIT": "send_buffer",
    OVERRUN: "overrun",
    REPLAY_OVERFLOW: "replay_buffer",
}


def _reason(exc: Exception) -> str:
    if isinstance(exc, SequenceError):
        return f"Connection closed with an error. InvalidOperationException: {exc}"
    detail = str(exc) if isinstance(exc, ProtocolError) else "Invalid UTF-8 in a text message."
    return f"Connection closed with an error. InvalidDataException: {detail}"
