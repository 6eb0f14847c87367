"""One logical SignalR connection, whatever transport carries it: its state, and its life
from the upgrade through the handshake to its end.

The connection's own fields live here (`__slots__`), and it alone writes them; what each
part owns is its own (see the package's docstring), and a part is handed, when made here,
the other parts it uses and, if it needs anything of the connection, the connection as
the read-only Protocol its own module declares (`Owner`: only what it reads and calls).
A HubConnection authenticates once, speaks
the handshake, joins the groups the user may receive (decided by its Groups from the
domain port, never by the client) and ends exactly once, whichever way: the client's
Close, a Close the server sends, the transport lost for good, a deadline passed. It can
outlive the physical connection: a stateful WebSocket that dropped waits for its resume
(stateful.py), a long-polling connection lives between polls.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.backplane.reservations import ConnectionReservation
from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import (
    HandshakeError,
    HubProtocolError,
    ProtocolError,
    SequenceError,
)
from messenger_realtime.hub import protocols, ratelimit
from messenger_realtime.hub.admission import Opening
from messenger_realtime.hub.clock import Entry, cancel
from messenger_realtime.hub.connection.acknowledgements import Acknowledgements
from messenger_realtime.hub.connection.authentication import Authentication
from messenger_realtime.hub.connection.budget import BYTES_PER_UNIT
from messenger_realtime.hub.connection.composing import Composing, claim_in
from messenger_realtime.hub.connection.ending import SEND_BUFFER_OVER, UNEXPECTED, Ending
from messenger_realtime.hub.connection.groups import Groups
from messenger_realtime.hub.connection.invocations import Invocations
from messenger_realtime.hub.connection.layer_messages import dispatch, event_frame
from messenger_realtime.hub.connection.marks import StreamMarks
from messenger_realtime.hub.connection.outbound import Outbound
from messenger_realtime.hub.connection.state import Process
from messenger_realtime.hub.connection.stateful import StatefulReconnect
from messenger_realtime.hub.connection.timeouts import SLACK, Timeouts
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.protocols import handshake
from messenger_realtime.hub.protocols.base import Frame, HubProtocol, MessageType
from messenger_realtime.hub.transports.base import WEBSOCKETS, Transport
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
FIRST_MESSAGE_WAIT = 0.5  # stateful: the longest events wait for the client's first message
POSTS_AT_ONCE = 2  # POSTs of one connection in hand at once (PostTurns)


class PostTurns:
    """A connection's POSTs (what a long-polling or event-stream client sends): acted on
    one at a time, in order, and at most POSTS_AT_ONCE in hand, the one acted on
    included; past that a POST is refused (429) rather than its body held in memory
    behind the others (the official clients send one at a time)."""

    __slots__ = ("_lock", "held")

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.held = 0  # POSTs in hand: acted on, or waiting their turn

    def full(self) -> bool:
        return self.held >= POSTS_AT_ONCE

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        self.held += 1
        try:
            async with self._lock:
                yield
        finally:
            self.held -= 1


class HubConnection:
    """A logical connection: its state, and the parts that act on it."""

    __slots__ = (
        "__weakref__",
        # Its parts.
        "acks",  # None but for a client that acknowledges (acknowledgements.py)
        "admission",  # a connect in progress from admit() to the handshake (hub/admission.py)
        "auth",
        "channel_layer",
        "clock",  # its process's (hub/clock.py): calls fire() at its nearest deadline
        "closing",  # no more events; a Close may be on its way
        "composing",  # its user's typing indicators (composing.py)
        "connection_id",
        "deadline",  # its entry in that clock
        "ended",
        "groups",
        "handshake_buffer",  # until the handshake: what arrived of its record
        "handshaken",
        "hub",  # its process (hub/process.py), as a connection uses it
        "invocations",
        "loop",
        "marks",  # a StreamMarks from its first event with an offset (marks.py)
        "opened",  # registered and counted (open() ran)
        "options",
        "outbound",
        "protocol",  # chosen by the handshake
        "receiving",  # its POSTs' turns, one at a time (long polling, SSE): PostTurns
        "stateful",  # None but for a stateful reconnect connection, after its handshake
        "stateful_allowed",  # negotiate granted stateful reconnect
        "timeouts",
        "transport",  # None while no physical connection carries it
        "user_id",
    )

    def __init__(
        self,
        *,
        hub: Process,
        connection_id: str,
        identity: Identity,
        token: str | None,
        options: HubOptions,
        transport: Transport,
        channel_layer: Any,
        stateful_allowed: bool = False,
    ) -> None:
        self.hub = hub
        self.connection_id, self.user_id = connection_id, identity.user_id
        self.options = options
        self.transport: Transport | None = transport
        self.channel_layer, self.stateful_allowed = channel_layer, stateful_allowed
        self.loop = asyncio.get_running_loop()
        self.protocol: HubProtocol | None = None
        self.handshaken = self.closing = self.ended = self.opened = False
        opened_at = self.loop.time()
        self.handshake_buffer: handshake.HandshakeBuffer | None = handshake.HandshakeBuffer(
            options.max_message_size
        )
        self.admission = Opening(None)  # counted from admit() on
        self.receiving: PostTurns | None = None  # made at first use (HTTP transports only)
        # Its parts, each handed what it uses (see the package's docstring): the other
        # parts, and itself only as the read-only Protocol (`Owner`) its part declares.
        self.auth = Authentication(identity, token, self.loop)
        self.groups = Groups(self.user_id, owner=self)
        self.outbound = Outbound(owner=self, opened_at=opened_at)
        user_budget = hub.user_budget(self.user_id, options, opened_at)
        self.invocations = Invocations(options, opened_at, user_budget)
        self.composing = Composing(
            self.user_id,
            loop=self.loop,
            layer=channel_layer,
            claim=claim_in(options.rate_limit_redis_url),
        )
        self.stateful: StatefulReconnect | None = None
        self.acks: Acknowledgements | None = None
        self.marks: StreamMarks | None = None
        # Its deadlines: the times they count from (timeouts.py), and its entry in the
        # process's clock, which calls fire() when the nearest one passes.
        self.timeouts = Timeouts(options, opened_at=opened_at)
        self.clock = hub.clock()
        self.deadline: Entry | None = None

    def acknowledging(self) -> Acknowledgements:
        """Its acknowledgements part: made when stateful reconnect is granted (the
        client's Acks), or at its client's first `Acknowledge`."""
        if self.acks is None:
            self.acks = Acknowledgements(
                self,
                self.hub.database_clock(),
                user_id=self.user_id,
                shares=self.hub.client_shares,
            )
        return self.acks

    def next_sequence_id(self) -> int | None:
        """The sequence id its next emitted message takes (None: not stateful)."""
        return self.stateful.buffer.next_id if self.stateful is not None else None

    async def frame_of(self, message: dict[str, Any]) -> Frame | None:
        """The frame of an event of its inbox for it, None when not for it (Outbound)."""
        return await event_frame(self, message)

    async def act_on(self, message: dict[str, Any]) -> None:
        """Act on a control message of its inbox (Outbound)."""
        await dispatch(self, message)

    def pinged(self) -> None:
        """A Ping the transport took itself (Outbound.take_pings): the client is alive,
        as receive() would record it, expiry and cost included."""
        now = self.timeouts.heard(self.loop.time())
        if self.closing:
            return
        ended = ending.expired(self.auth, now)
        if ended is not None:
            self.end_soon(ended)
            return
        flooded = self.invocations.pay(now, self.options)
        if flooded is not None:
            self.end_soon(flooded)

    def stream_marks(self) -> StreamMarks:
        """Its StreamMarks (marks.py), made at first use: at its first event with an
        offset, or its first Recover."""
        marks = self.marks
        if marks is None:
            marks = self.marks = StreamMarks()
        return marks

    def receive_turns(self) -> "PostTurns":
        """Its POSTs' turns (long polling, Server-Sent Events): made at first use."""
        if self.receiving is None:
            self.receiving = PostTurns()
        return self.receiving

    async def open(self) -> None:
        """Start the clock; the transport has accepted (its process registered it:
        HubProcess.open)."""
        metrics.hub_connections.inc()
        self.opened = True
        self.wake_at(self.loop.time())

    async def admit(
        self,
        admission: Opening,
        identity: Identity,
        token: str | None,
        claim: ConnectionReservation | None = None,
    ) -> None:
        """Before the transport accepts: counted as a connect in progress (`admission`,
        until its handshake is answered or it ends), its token's claim, the reads and
        joins of its groups (groups.py)."""
        self.admission = admission
        await self.groups.admit(identity, token, claim)

    # -- client -> server -------------------------------------------------------

    async def receive(self, data: Frame) -> None:
        """What the transport got from the client: a frame, or a POST body."""
        now = self.timeouts.heard(self.loop.time())
        if self.closing:
            return
        ended = ending.expired(self.auth, now)
        if ended is not None:
            await self.end(ended)
            return
        try:
            if not self.handshaken:
                rest = await self._read_handshake(data)
                if rest is None:
                    return
                data = rest
            assert self.protocol is not None
            units = len(data) // BYTES_PER_UNIT  # a small frame's reading is in its calls
            if units:
                invocations = self.invocations
                wait = invocations.budget.delay(units, now, invocations.user_budget)
                if wait > 0:  # its socket is not read meanwhile (the server's flow control)
                    await asyncio.sleep(wait)
                    if self.closing:
                        return
            for message in self.protocol.parse(data):
                if not await self._receive_message(message):
                    return
        except (UnicodeDecodeError, HubProtocolError) as exc:
            await self.end(ending.error(_reason(exc)))
        except Exception:
            # Whatever a client's input set off, it ends that connection alone, with a
            # Close and at once (registry, groups), never a 1011 left for the clock.
            logger.exception("hub message failed", extra={**self.ids(), "action": "receive"})
            await self.end(ending.error(UNEXPECTED))

    async def _receive_message(self, message: dict[str, Any]) -> bool:
        """Act on one message; False once the connection was closed."""
        stateful = self.stateful
        if stateful is not None and not stateful.sequenced_in(message):
            # An Ack, a Sequence or a duplicate: it pays one unit, and nothing more to do.
            flooded = self.invocations.pay(self.loop.time(), self.options)
            if flooded is not None:
                await self.end(flooded)
                return False
            if self.acks is not None and message["type"] == MessageType.ACK:
                self.acks.acked(message["sequenceId"])
            return True
        self.outbound.start()  # stateful: the client's first message after the handshake
        return await self.invocations.handle(self, message)

    async def _read_handshake(self, data: Frame) -> bytes | None:
        """The bytes after a successful handshake, or None (incomplete, or refused)."""
        assert self.handshake_buffer is not None
        record, rest = self.handshake_buffer.feed(data.encode() if isinstance(data, str) else data)
        transport = self.transport
        if record is None or transport is None:
            return None
        try:
            request = handshake.parse_handshake(record, binary_ok=transport.binary_ok)
        except HandshakeError as exc:
            await self.end(ending.handshake_refused(str(exc)))
            return None
        self.handshake_buffer = None  # read: it holds nothing more for this connection
        self.protocol = protocols.create(request.protocol, self.options.max_message_size)
        transport.use_binary(self.protocol.binary)
        if self.stateful_allowed and request.version >= 2 and transport.name == WEBSOCKETS:
            self.stateful = stateful = StatefulReconnect(
                buffer_size=self.options.stateful_reconnect_buffer_size,
                disconnect_timeout=self.options.disconnect_timeout,
                protocol=self.protocol,
                outbound=self.outbound,
                owner=self,
            )
            self.outbound.numbered_by(stateful.emit)
            self.acknowledging()
        # Joined before answering (admit() at the upgrade, or here), and forwarding
        # starts only after: the client never sees an event before its handshake
        # response.
        groups = self.groups
        if groups.admitted:
            session_holds = not groups.session_lost
        else:
            await groups.join_all()
            # A logout's control message reaches a connection only through its user
            # group, joined just now: one sent since the upgrade authenticated this
            # connection went unheard. So read the session again, after joining (the
            # logout deletes the session before it sends: backplane/control.py), and a
            # logout is never missed. (admit() reads it after joining, too.)
            session_holds = await self.auth.session_holds(self.user_id)
        self.handshaken = True
        self.admission.done()
        ok = handshake.HANDSHAKE_OK
        await self.outbound.send(ok.encode() if self.protocol.binary else ok)
        if not session_holds:
            await self.end(ending.session_ended())
            return None
        logger.info(
            "hub connected",
            extra={
                "action": "connected",
                Field.CONNECTION_ID: self.connection_id,
                Field.USER_ID: self.user_id,
                "chats": len(groups.chats),
                "transport": transport.name,
                "protocol": self.protocol.name,
                "stateful": self.stateful is not None,
            },
        )
        if self.stateful is None:
            self.outbound.start()
        else:
            # The official JavaScript client counts messages only once it has handled
            # the handshake response, and in Node a message read together with that
            # response would go uncounted (then be delivered twice after a resume).
            # It sends a Ping right after; clients that do not (.NET) wait this long.
            self.loop.call_later(FIRST_MESSAGE_WAIT, self.outbound.start)
        return rest

    # -- stateful reconnect -------------------------------------------------------

    def resumable_by(self, user_id: UUID) -> str | None:
        """Why a resume by `user_id` is refused, or None when it may go ahead."""
        if self.user_id != user_id:
            return "connection belongs to another user"
        if not self.may_resume():
            return "connection cannot resume (not stateful, ended or over its buffer)"
        return None

    async def resume(self, transport: Transport, identity: Identity, token: str | None) -> None:
        """Carry on over a new WebSocket, authenticated again (stateful.py replays)."""
        stateful = self.stateful
        assert stateful is not None
        old, self.transport = self.transport, transport
        stateful.attach()
        if old is not None:  # half-open: the server had not seen it drop yet
            await old.close()
        self.auth.renew(identity, token, self.loop)
        if not await self.auth.session_holds(self.user_id):
            # As at the handshake: a logout since the upgrade authenticated this resume
            # named a session the connection did not have yet.
            stateful.refused()
            await self.end(ending.session_ended())
            return
        await stateful.replay(transport)
        now = self.timeouts.heard(self.loop.time())  # the client counts as heard, and
        self.outbound.sent(now)  # written to, now
        self.wake_at(now)

    def may_resume(self) -> bool:
        """Whether a resume may carry it on: stateful, handshaken, not closing, and its
        replay buffer still holds all the client has not acked."""
        stateful = self.stateful
        return (
            stateful is not None and not self.closing and self.handshaken and stateful.resumable()
        )

    # -- ending -------------------------------------------------------------------

    async def transport_lost(self, transport: Transport, *, resumable: bool = False) -> None:
        """The physical connection ended: wait for a resume if it may come, else end."""
        if transport is not self.transport:
            return  # already replaced by a resume
        self.transport = None
        stateful = self.stateful
        if resumable and stateful is not None and self.may_resume():
            stateful.detach()
            return
        await self.end(ending.RELEASED)

    async def end(self, how: Ending) -> None:
        """End this connection, whichever way (ending.py: the reasons as data). It ends
        once: a second end only closes what the first left open (an `once` ending not
        even that)."""
        if how.once and self.closing:
            return
        self.closing = True  # before any Close: a resume it may prompt is refused
        if how.metric is not None:
            metrics.hub_forced_closes.labels(reason=how.metric).inc()
        if how.connects_charged:
            charge = ratelimit.acharge(
                ratelimit.CONNECTS, self.user_id, how.connects_charged, self.options
            )
            self.hub.keep(asyncio.ensure_future(charge))
        if how.reason is not None:
            extra = {**self.ids(), "reason": how.reason, **dict(how.fields)}
            logger.info(how.log, extra=extra)
        if how.handshake_error is not None:
            await self.outbound.send(handshake.handshake_error(how.handshake_error))
        elif how.close:
            close = self._close(how.error, allow_reconnect=how.allow_reconnect)
            await self.outbound.send_close(close)
        transport = self.transport
        if how.close_transport and transport is not None:
            with contextlib.suppress(Exception):  # the socket may be gone already
                await transport.close(drop=how.drop)  # after what was sent
        await self._release()

    def fire(self, now: float) -> None:
        """The process's clock: the nearest of its deadlines passed. Timeouts says what
        fell due (timeouts.py); the connection does it and asks to be called again."""
        self.deadline = None
        if self.closing:
            return
        stateful = self.stateful
        due = self.timeouts.due(
            now,
            handshaken=self.handshaken,
            transport=self.transport,
            stateful=stateful,
            auth=self.auth,
            last_sent=self.outbound.last_sent,
        )
        if due.end is not None:
            self.end_soon(due.end)
            return
        if due.ping:
            protocol = self.protocol
            assert protocol is not None
            self.outbound.write_now(protocol.ping())
        next_at = due.next_at
        if due.ack and stateful is not None:
            stateful.send_ack_now()
            if stateful.ack_at is not None:  # the client could not hear it: later
                next_at = min(next_at, stateful.ack_at)
        self.wake_at(next_at)

    def wake_at(self, when: float) -> None:
        """A deadline may now be as early as `when` (loop time): fire() by then."""
        self.deadline = self.clock.schedule(self, when + SLACK, self.deadline)

    def end_soon(self, how: Ending) -> None:
        """As end(), from code that cannot wait (the clock): in a task of its own, so one
        connection's close never holds up the others'. An ending that is not `once`
        marks it closing now: nothing it receives meanwhile is acted on."""
        if not how.once:
            self.closing = True
        self.hub.keep(asyncio.ensure_future(self.end(how)))

    async def _release(self) -> None:
        """Release everything, once: groups, tasks, the registry entry."""
        if self.ended:
            return
        self.ended = self.closing = True
        cancel(self.deadline)
        self.deadline = None
        self.admission.done()
        # Its place among its user's open connections frees (hub/user_connections.py).
        self.hub.give_back_place(self.user_id, self.connection_id, self.options)
        transport = self.transport
        if transport is None or not transport.lingers():
            self.hub.forget(self.connection_id, self)
        if self.opened:
            metrics.hub_connections.dec()
            metrics.hub_disconnects.inc()
            logger.info("hub disconnected", extra={**self.ids(), "action": "disconnected"})
        self.outbound.stop()
        # Also before the handshake finished: the user group is joined before it answers.
        await self.groups.leave_all()

    async def send_overflow(self, unsent: Any) -> None:
        """Daphne: the connection's unsent data passed SEND_BUFFER_LIMIT
        (daphne/websocket_protocol.py, daphne/web_request.py)."""
        await self.end(ending.dropped(SEND_BUFFER_OVER, unsent=unsent))

    def _close(self, error: str | None = None, *, allow_reconnect: bool = False) -> Frame:
        close = self.protocol.close if self.protocol else protocols.JsonProtocol.close
        return close(error, allow_reconnect=allow_reconnect)

    def ids(self) -> dict[str, Any]:
        """What its log lines name it by (never a payload, never a credential)."""
        return {
            "action": "close",
            Field.CONNECTION_ID: self.connection_id,
            Field.USER_ID: self.user_id,
        }


def _reason(exc: Exception) -> str:
    if isinstance(exc, SequenceError):
        return f"Connection closed with an error. InvalidOperationException: {exc}"
    detail = str(exc) if isinstance(exc, ProtocolError) else "Invalid UTF-8 in a text message."
    return f"Connection closed with an error. InvalidDataException: {detail}"
