"""Stateful reconnect for a logical connection: a part of HubConnection.

On iff negotiate granted it (the client asked, STATEFUL_RECONNECT_BUFFER_SIZE > 0), the
handshake is version 2 and the transport is WebSockets. Then every hub invocation message
sent is numbered and kept (replay.ReplayBuffer) until the client acks it; what arrives
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
from typing import Any, Protocol
from uuid import UUID

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.hub.connection.ending import REPLAY_OVERFLOW, Ending
from messenger_realtime.hub.connection.outbound import Outbound
from messenger_realtime.hub.connection.replay import InboundSequence, ReplayBuffer
from messenger_realtime.hub.protocols.base import (
    SEQUENCED,
    Frame,
    HubProtocol,
    MessageType,
    join_frames,
)
from messenger_realtime.hub.transports.base import Transport
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
ACK_INTERVAL = 1.0  # seconds between Acks at most, as ASP.NET and the official client


class Owner(Protocol):
    """Its connection (lifecycle.HubConnection), as StatefulReconnect reads and calls it:
    all read-only here (the connection writes its own fields)."""

    @property
    def connection_id(self) -> str: ...

    @property
    def user_id(self) -> UUID: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...  # its time: loop.time()

    @property
    def transport(self) -> Transport | None: ...  # the one carrying it now (a resume swaps it)

    @property
    def closing(self) -> bool: ...

    def wake_at(self, when: float) -> None: ...  # an Ack or the resume window falls due

    async def end(self, how: Ending) -> None: ...


class StatefulReconnect:
    """A stateful connection's sequence both ways, its replay buffer, and its resume.

    It owns the numbering both ways, the buffer, when its next Ack is due and since when
    it is detached. Made at the handshake, it is handed its connection's protocol (chosen
    then, for good), its Outbound (the writes outside the sequence, the client's Pings
    taken), and one reference to its connection, typed `Owner` (above), for the rest:
    the transport carrying it now, whether it is closing, how to end it, its deadlines'
    `moved` (timeouts.py).
    """

    __slots__ = (
        "_owner",
        "ack_at",
        "buffer",
        "detached_at",
        "disconnect_timeout",
        "inbound",
        "outbound",
        "protocol",
        "resuming",
    )

    def __init__(
        self,
        *,
        buffer_size: int,
        disconnect_timeout: float,
        protocol: HubProtocol,
        outbound: Outbound,
        owner: Owner,
    ) -> None:
        self.protocol, self.outbound = protocol, outbound
        self.disconnect_timeout = disconnect_timeout  # how long a detached one waits
        self._owner = owner
        self.buffer = ReplayBuffer(buffer_size)
        self.inbound = InboundSequence()
        self.ack_at: float | None = None  # loop time of the next Ack, when one is due
        self.resuming = False  # replaying after a resume: live sends wait in the buffer
        self.detached_at: float | None = None  # since when no WebSocket carries it

    def sequenced_in(self, message: dict[str, Any]) -> bool:
        """Number an incoming message; False when it needs nothing more (an Ack, a
        Sequence, or a duplicate of one already handled). Raises SequenceError."""
        kind = message["type"]
        if kind == MessageType.ACK:
            self.buffer.ack(message["sequenceId"])
            return False
        if kind == MessageType.SEQUENCE:
            self.inbound.sequence(message["sequenceId"])
            return False
        if kind not in SEQUENCED:
            return True
        if not self.inbound.accept():
            return False
        if self.ack_at is None:
            self.ack_at = self._owner.loop.time() + ACK_INTERVAL
            self._owner.wake_at(self.ack_at)  # the clock sends it (timeouts.py)
        return True

    def send_ack_now(self) -> None:
        """The Ack that is due, unless the client cannot hear it now (then later)."""
        if self._owner.transport is None or self.resuming:
            self.ack_at = self._owner.loop.time() + ACK_INTERVAL
            return
        self.ack_at = None
        sequence_id = self.inbound.ack_due()
        if sequence_id is not None:
            self.outbound.write_now(self.protocol.ack(sequence_id))

    async def emit(self, *frames: Frame) -> None:
        """Number and keep each message, then send them (as one frame when several)."""
        buffer = self.buffer
        was_resumable = buffer.resumable
        kept = all([buffer.add(frame) for frame in frames])
        transport = self._owner.transport
        if transport is None or self.resuming:  # not on the wire: only the buffer has it
            if not kept:
                await self._owner.end(ending.dropped(REPLAY_OVERFLOW))
            return
        if was_resumable and not buffer.resumable:
            # The client acks too slowly for the bound: it stays connected, but a drop
            # from now on means a fresh start (its resume is refused).
            logger.info("hub stateful reconnect given up", extra=self._log_ids())
        await transport.send(join_frames(list(frames)))

    def resumable(self) -> bool:
        """Whether its buffer still holds all a resume needs (its connection decides the
        rest: HubConnection.may_resume)."""
        return self.buffer.resumable

    def detach(self) -> None:
        """The WebSocket dropped: keep everything for DISCONNECT_TIMEOUT (timeouts.py)."""
        self.detached_at = self._owner.loop.time()
        self.protocol.reset()  # a message cut in half is resent whole after the resume
        logger.info("hub connection detached", extra=self._log_ids())
        self._owner.wake_at(self.detached_at + self.disconnect_timeout)

    def attach(self) -> None:
        """A new WebSocket carries it (HubConnection.resume): live sends wait in the
        buffer until replay() has sent what it holds."""
        self.detached_at, self.resuming = None, True

    def refused(self) -> None:
        """The resume was refused after attach(): sends go on the wire again (its Close)."""
        self.resuming = False

    async def replay(self, transport: Transport) -> None:
        """Carry on over the new WebSocket: the Sequence, the unacked messages, then live."""
        protocol, outbound = self.protocol, self.outbound
        protocol.reset()
        transport.use_binary(protocol.binary)
        if outbound.delivering:
            outbound.take_pings()
        buffer = self.buffer
        sent = buffer.first_id() - 1
        await outbound.send(protocol.sequence(sent + 1))
        # Messages added while these are written join the end of the buffer; the loop
        # ends when nothing is left unsent, and live sends follow from then on.
        replayed = 0
        while not self._owner.closing and (pending := buffer.frames_after(sent)):
            for message_id, frame in pending:
                await transport.send(frame)
                sent, replayed = message_id, replayed + 1
        self.resuming = False
        logger.info("hub connection resumed", extra={**self._log_ids(), "replayed": replayed})

    def _log_ids(self) -> dict[str, Any]:
        """What its log lines name it by."""
        owner = self._owner
        return {Field.CONNECTION_ID: owner.connection_id, Field.USER_ID: owner.user_id}
