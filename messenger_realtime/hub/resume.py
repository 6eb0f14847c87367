"""Stateful reconnect for a logical connection: a mixin of HubConnection.

On iff negotiate granted it (the client asked, STATEFUL_RECONNECT_BUFFER_SIZE > 0), the
handshake is version 2 and the transport is WebSockets. Then every hub invocation message
sent is numbered and kept (stateful.ReplayBuffer) until the client acks it; what arrives
is numbered and duplicates are dropped; Acks go out at most once a second. A WebSocket
that drops (close code 1006: no close frame) leaves the connection detached, still
receiving and buffering, for DISCONNECT_TIMEOUT; a WebSocket upgrade with the same
connection token, the same user and valid credentials resumes it: the Sequence, then
every unacked message in order, then live traffic, with no handshake.

Anything else ends it: a clean close, the client's Close, a Close the server sends (the
connection is marked closing before that Close is written, so the immediate resume the
client attempts after it is refused), the buffer over its bound while detached, or the
resume window passing. A refused resume makes the official client start afresh.
"""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from messenger_realtime.hub.auth import Identity
from messenger_realtime.hub.protocols.base import (
    SEQUENCED,
    Frame,
    HubProtocol,
    MessageType,
    join_frames,
)
from messenger_realtime.hub.stateful import InboundSequence, ReplayBuffer
from messenger_realtime.hub.timers import Timeouts
from messenger_realtime.hub.transports.base import WEBSOCKETS, Transport
from messenger_realtime.ops.logging import Field

logger = logging.getLogger(__name__)
ACK_INTERVAL = 1.0  # seconds between Acks at most, as ASP.NET and the official client


@dataclass
class Stateful:
    buffer: ReplayBuffer
    inbound: InboundSequence = field(default_factory=InboundSequence)
    ack_at: float | None = None  # loop time of the next Ack, when one is due


class StatefulConnection:
    stateful: Stateful | None
    stateful_allowed: bool
    resuming = False
    detached_at: float | None

    if TYPE_CHECKING:  # provided by HubConnection
        transport: Transport | None
        protocol: HubProtocol | None
        loop: asyncio.AbstractEventLoop
        options: Any
        closing: bool
        handshaken: bool
        connection_id: str
        user_id: Any
        timeouts: Timeouts
        last_sent: float
        last_received: float
        expires_at: float
        expiry_reason: str
        token: str | None
        session: str | None
        session_key: str | None

        def credentials_end(self, identity: Identity, token: str | None) -> tuple[float, str]: ...

        async def _drop(self, reason: str, **fields: Any) -> None: ...

        async def _session_holds(self) -> bool: ...

        async def end_session(self) -> None: ...

        async def _send(self, frame: Frame) -> None: ...

        def write_now(self, frame: Frame) -> None: ...

        def _take_pings(self) -> None: ...

        delivering: bool

    def _choose_stateful(self, version: int) -> None:
        transport = self.transport
        if self.stateful_allowed and version >= 2 and transport and transport.name == WEBSOCKETS:
            self.stateful = Stateful(ReplayBuffer(self.options.stateful_reconnect_buffer_size))

    def _sequenced_in(self, message: dict[str, Any]) -> bool:
        """Number an incoming message; False when it needs nothing more (an Ack, a
        Sequence, or a duplicate of one already handled). Raises SequenceError."""
        assert self.stateful is not None
        kind = message["type"]
        if kind == MessageType.ACK:
            self.stateful.buffer.ack(message["sequenceId"])
            return False
        if kind == MessageType.SEQUENCE:
            self.stateful.inbound.sequence(message["sequenceId"])
            return False
        if kind not in SEQUENCED:
            return True
        if not self.stateful.inbound.accept():
            return False
        if self.stateful.ack_at is None:
            self.stateful.ack_at = self.loop.time() + ACK_INTERVAL
            self.timeouts.moved(self.stateful.ack_at)  # the clock sends it (timers.py)
        return True

    def _send_ack_now(self) -> None:
        """The Ack that is due, unless the client cannot hear it now (then later)."""
        assert self.stateful is not None and self.protocol is not None
        if self.transport is None or self.resuming:
            self.stateful.ack_at = self.loop.time() + ACK_INTERVAL
            return
        self.stateful.ack_at = None
        sequence_id = self.stateful.inbound.ack_due()
        if sequence_id is not None:
            self.write_now(self.protocol.ack(sequence_id))

    async def _emit_stateful(self, *frames: Frame) -> None:
        """Number and keep each message, then send them (as one frame when several)."""
        assert self.stateful is not None
        buffer = self.stateful.buffer
        was_resumable = buffer.resumable
        kept = all([buffer.add(frame) for frame in frames])
        if self.transport is None or self.resuming:  # not on the wire: only the buffer has it
            if not kept:
                await self._drop(REPLAY_OVERFLOW)
            return
        if was_resumable and not buffer.resumable:
            # The client acks too slowly for the bound: it stays connected, but a drop
            # from now on means a fresh start (its resume is refused).
            logger.info("hub stateful reconnect given up", extra=self._log_ids())
        await self.transport.send(join_frames(list(frames)))

    def _may_resume(self) -> bool:
        return (
            not self.closing
            and self.handshaken
            and self.stateful is not None
            and self.stateful.buffer.resumable
        )

    def _detach(self) -> None:
        """The WebSocket dropped: keep everything for DISCONNECT_TIMEOUT (timers.py)."""
        assert self.protocol is not None
        self.detached_at = self.loop.time()
        self.protocol.reset()  # a message cut in half is resent whole after the resume
        logger.info("hub connection detached", extra=self._log_ids())
        self.timeouts.moved(self.detached_at + self.options.disconnect_timeout)

    def resumable_by(self, user_id: Any) -> str | None:
        """Why a resume by `user_id` is refused, or None when it may go ahead."""
        if self.user_id != user_id:
            return "connection belongs to another user"
        if not self._may_resume():
            return "connection cannot resume (not stateful, ended or over its buffer)"
        return None

    async def resume(self, transport: Transport, identity: Identity, token: str | None) -> None:
        """Carry on over a new WebSocket: the Sequence, the unacked messages, then live."""
        assert self.stateful is not None and self.protocol is not None
        old, self.transport = self.transport, transport
        self.detached_at, self.resuming = None, True
        if old is not None:  # half-open: the server had not seen it drop yet
            await old.close()
        self.token, self.session = token, identity.session
        self.session_key = identity.session_key
        self.expires_at, self.expiry_reason = self.credentials_end(identity, token)
        if not await self._session_holds():
            # As at the handshake: a logout since the upgrade authenticated this resume
            # named a session the connection did not have yet (hub/connection.py).
            self.resuming = False
            await self.end_session()
            return
        self.protocol.reset()
        transport.use_binary(self.protocol.binary)
        if self.delivering:
            self._take_pings()
        buffer = self.stateful.buffer
        sent = buffer.first_id() - 1
        await self._send(self.protocol.sequence(sent + 1))
        # Messages added while these are written join the end of the buffer; the loop
        # ends when nothing is left unsent, and live sends follow from then on.
        replayed = 0
        while not self.closing and (pending := buffer.frames_after(sent)):
            for message_id, frame in pending:
                await transport.send(frame)
                sent, replayed = message_id, replayed + 1
        self.resuming = False
        self.last_received = self.last_sent = self.loop.time()
        self.timeouts.moved(self.last_sent)
        logger.info("hub connection resumed", extra={**self._log_ids(), "replayed": replayed})

    def _log_ids(self) -> dict[str, Any]:
        return {Field.CONNECTION_ID: self.connection_id, Field.USER_ID: self.user_id}


REPLAY_OVERFLOW = "replay buffer over STATEFUL_RECONNECT_BUFFER_SIZE"
