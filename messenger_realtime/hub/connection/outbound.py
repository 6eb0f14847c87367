"""Server to client: everything a connection writes, and the delivery of what the
process's reader put in its inbox (the events waiting at once in one frame). A part of
HubConnection.

Three kinds of writes: `send` for messages outside the sequence (the handshake response,
a Ping, a Close, an Ack, a Sequence), `emit`/`emit_many` for hub invocation messages
(events, completions: numbered and kept for a resume when stateful, stateful.py), and
`write_now` for code that cannot wait (the clock's pings and Acks).

The frames built for a batch wait in `unsent` until the batch's frame is full or done.
A connection closed meanwhile (its credentials expired while an event's membership read
ran, ops' disconnect, an overrun, ...) sends them before its Close (send_close): they
were checked while the connection could still have them. What the batch holds after them
is not sent, and the Close (with allowReconnect, but for a logout or a protocol error)
is how the client learns to resync.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.backplane.publisher import EVENT_TYPE
from messenger_realtime.hub import delivery_slo
from messenger_realtime.hub.connection.acknowledgements import Acknowledgements
from messenger_realtime.hub.connection.ending import Ending
from messenger_realtime.hub.connection.groups import Groups
from messenger_realtime.hub.database_clock import DatabaseClock
from messenger_realtime.hub.protocols.base import Frame, join_frames
from messenger_realtime.hub.transports.base import Transport
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)
# Several events waiting for a connection go out in one frame (the protocols allow any
# number of records per frame): at most this many records, or about this many bytes.
FRAME_RECORDS = 100
FRAME_BYTES = 64 * 1024
# Bytes a client may not have taken yet and still count as keeping up: a few frames in
# flight over a slow link. Far under the smallest SEND_BUFFER_LIMIT (64 KiB), so what
# goes out only below it (a typing indicator) never brings a connection to its bound.
QUIET_BYTES = 16 * 1024
# Stateful reconnect's emit (StatefulReconnect.emit): numbers, keeps and sends messages.
Numbered = Callable[..., Awaitable[None]]


class Keeps(Protocol):
    """Its process, as Outbound uses it (HubProcess.keep, .database_clock)."""

    def keep(self, task: "asyncio.Future[None]") -> None: ...

    def database_clock(self) -> DatabaseClock: ...


class Owner(Protocol):
    """Its connection (lifecycle.HubConnection), as Outbound reads and calls it: all
    read-only here (the connection writes its own fields)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...  # its time: loop.time()

    @property
    def transport(self) -> Transport | None: ...  # the one carrying it now (a resume swaps it)

    @property
    def closing(self) -> bool: ...

    @property
    def groups(self) -> Groups: ...  # its inbox

    @property
    def hub(self) -> Keeps: ...  # holds a task nobody awaits till done

    @property
    def acks(self) -> Acknowledgements | None: ...  # when its client acknowledges

    async def end(self, how: Ending) -> None: ...

    async def frame_of(self, message: dict[str, Any]) -> Frame | None:
        """An event's frame for it (None: not for it): layer_messages.py."""

    async def act_on(self, message: dict[str, Any]) -> None:
        """A control message of its inbox acted on: layer_messages.py."""

    def pinged(self) -> None:
        """A Ping the transport took itself (take_pings)."""

    def ids(self) -> dict[str, Any]: ...


class Outbound:
    """A connection's writes, and the task that forwards its inbox while it runs.

    It owns when it last wrote (`last_sent`: the keep-alive counts from there), the
    frames of the batch in hand (`unsent`) and its delivery task. What it needs of its
    connection it reads through the one reference it is handed when made, typed `Owner`
    (above): read-only, so it never writes the connection's fields."""

    __slots__ = (
        "_clock",
        "_live",
        "_numbered",
        "_owner",
        "delivering",
        "last_sent",
        "task",
        "unsent",
    )

    def __init__(self, owner: Owner, *, opened_at: float) -> None:
        self._owner = owner
        self._numbered: Numbered | None = None  # stateful reconnect's, once granted
        self.last_sent = opened_at  # loop time of its last write (none yet: its opening)
        self.delivering = False  # its inbox's messages go out (handshake answered)
        self.task: asyncio.Task[None] | None = None  # while it forwards its inbox
        self.unsent: list[Frame] = []  # built for the current batch, not emitted yet
        # The live events among them, (committed_at, event name): timed when handed over.
        self._live: list[tuple[float, str]] = []
        self._clock: DatabaseClock | None = None  # the process's, at the first live event

    def numbered_by(self, emit: Numbered) -> None:
        """Stateful reconnect was granted (at the handshake): from now on hub invocation
        messages go through its `emit`, numbered and kept for a resume (stateful.py)."""
        self._numbered = emit

    def sent(self, now: float | None = None) -> None:
        """Something went out to the client now (the keep-alive counts from here)."""
        self.last_sent = self._owner.loop.time() if now is None else now

    def start(self) -> None:
        """From now on, what arrives in its inbox goes out (after the handshake; for a
        stateful connection, after the client's first message)."""
        if self.delivering or self._owner.closing:
            return
        self.delivering = True
        self._owner.groups.inbox.start_draining(self._wake)
        self.take_pings()

    def stop(self) -> None:
        """The connection ended: the delivery task, if one runs elsewhere, stops."""
        task = self.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def _wake(self) -> None:
        """Something arrived in its inbox: a delivery task, unless one runs (it takes
        whatever arrives while it runs, and ends when the inbox is empty)."""
        if self.task is None and not self._owner.closing:
            self.task = asyncio.create_task(self._deliver())

    def backlogged(self) -> bool:
        """Whether anything waits to reach the client: messages in its inbox, frames of
        the batch in hand, over QUIET_BYTES the client has not taken, or no transport
        (a stateful connection between sockets). A volatile message (a typing
        indicator) goes out only when not: it is the first thing dropped."""
        owner = self._owner
        if self.unsent or len(owner.groups.inbox):
            return True
        transport = owner.transport
        return transport is None or transport.unsent() > QUIET_BYTES

    def take_pings(self) -> None:
        """Let the transport take the client's Pings itself, where it can (a WebSocket
        under Daphne: daphne/websocket_protocol.py), now that a Ping means nothing but
        `pinged`."""
        owner = self._owner
        transport = owner.transport
        if transport is not None:
            transport.take_pings(owner.pinged)

    async def _deliver(self) -> None:
        """Forward what the process's reader put in this connection's inbox, until it is
        empty: the events waiting at once in one frame, control messages in their turn."""
        owner = self._owner
        inbox = owner.groups.inbox
        try:
            while not owner.closing:
                size = 0
                messages = inbox.take_now(FRAME_RECORDS)
                if not messages:
                    break  # no await since: nothing can arrive before this task is gone
                for message in messages:
                    if message["type"] == EVENT_TYPE:
                        frame = await owner.frame_of(message)
                        if owner.closing:  # closed meanwhile: its Close sent `unsent` first
                            return
                        if frame is not None:
                            if owner.acks is not None:
                                owner.acks.built(len(self.unsent), message)
                            committed_at = message.get("committed_at")
                            if committed_at is not None:
                                self._live.append((committed_at, message["event"]))
                            self.unsent.append(frame)
                            size += len(frame)
                        if size >= FRAME_BYTES:
                            await self.flush()
                            size = 0
                    else:
                        await self.flush()
                        size = 0
                        await owner.act_on(message)
                        if owner.closing:
                            return
                await self.flush()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("hub connection failed", extra=owner.ids())
            await owner.end(ending.SHUTDOWN)
        finally:
            if self.task is asyncio.current_task():
                self.task = None

    async def flush(self) -> None:
        """Send the event frames built and not sent yet (a recovery sends them first)."""
        frames, self.unsent = self.unsent, []  # taken first: a Close meanwhile sends none twice
        live, self._live = self._live, []
        owner = self._owner
        if owner.acks is not None:
            owner.acks.emitting()  # nothing awaited before emit_many numbers them
        await self.emit_many(frames)
        if live:
            self._handed_over(live)

    def _handed_over(self, live: list[tuple[float, str]]) -> None:
        """These live events' frames are with the transport now: the server's measure of
        the delivery SLO (hub/delivery_slo.py). Between sockets (a stateful connection
        waiting for its client) they are kept for a resume, not handed over: not timed."""
        transport = self._owner.transport
        if transport is None:
            return
        clock = self._clock
        if clock is None:
            clock = self._clock = self._owner.hub.database_clock()
        delivery_slo.handed_over(live, transport.name, clock.now())

    async def send_close(self, close: Frame) -> None:
        """The Close, after the frames built before it (whichever task closes)."""
        with contextlib.suppress(Exception):  # the socket may be gone already
            await self.flush()
        with contextlib.suppress(Exception):
            await self.send(close)

    async def send(self, frame: Frame) -> None:
        """A message outside the sequence (handshake, ping, Close, Ack, Sequence)."""
        self.sent()
        transport = self._owner.transport
        if transport is not None:
            await transport.send(frame)

    def write_now(self, frame: Frame) -> None:
        """As send, from code that cannot wait (the clock's pings and Acks): at once
        where the transport writes without waiting (a WebSocket), else in a task."""
        self.sent()
        transport = self._owner.transport
        if transport is None:
            return
        if not transport.send_now(frame):
            self._owner.hub.keep(asyncio.ensure_future(transport.send(frame)))

    async def emit(self, frame: Frame) -> None:
        """A hub invocation message (an event, a completion): numbered and kept for a
        resume when stateful (stateful.py)."""
        self.sent()
        if self._numbered is not None:
            await self._numbered(frame)
            return
        transport = self._owner.transport
        if transport is not None:
            await transport.send(frame)

    async def emit_many(self, frames: list[Frame]) -> None:
        """Hub invocation messages as one frame (each still numbered when stateful)."""
        if not frames:
            return
        if len(frames) == 1:
            await self.emit(frames[0])
            return
        self.sent()
        if self._numbered is not None:
            await self._numbered(*frames)
            return
        transport = self._owner.transport
        if transport is not None:
            await transport.send(join_frames(frames))
