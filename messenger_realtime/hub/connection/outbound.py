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
import logging

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.hub.connection.events import EVENT_TYPE, dispatch, event_frame
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.protocols.base import Frame, join_frames

logger = logging.getLogger(__name__)
# Several events waiting for a connection go out in one frame (the protocols allow any
# number of records per frame): at most this many records, or about this many bytes.
FRAME_RECORDS = 100
FRAME_BYTES = 64 * 1024


class Outbound:
    """A connection's writes, and the task that forwards its inbox while it runs."""

    __slots__ = ("connection", "delivering", "task", "unsent")

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.delivering = False  # its inbox's messages go out (handshake answered)
        self.task: asyncio.Task[None] | None = None  # while it forwards its inbox
        self.unsent: list[Frame] = []  # built for the current batch, not emitted yet

    def start(self) -> None:
        """From now on, what arrives in its inbox goes out (after the handshake; for a
        stateful connection, after the client's first message)."""
        c = self.connection
        if self.delivering or c.closing:
            return
        self.delivering = True
        c.groups.inbox.start_draining(self._wake)
        self.take_pings()

    def stop(self) -> None:
        """The connection ended: the delivery task, if one runs elsewhere, stops."""
        task = self.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def _wake(self) -> None:
        """Something arrived in its inbox: a delivery task, unless one runs (it takes
        whatever arrives while it runs, and ends when the inbox is empty)."""
        if self.task is None and not self.connection.closing:
            self.task = asyncio.create_task(self._deliver())

    def take_pings(self) -> None:
        """Let the transport take the client's Pings itself, where it can (a WebSocket
        under Daphne: daphne/websocket.py), now that a Ping means nothing but `heard`."""
        transport = self.connection.transport
        if transport is not None:
            transport.take_pings(self.heard)

    def heard(self) -> None:
        """A Ping the transport took itself: the client is alive (as receive() would
        record it, expiry included)."""
        c = self.connection
        now = c.heard()
        if now >= c.auth.expires_at and not c.closing:
            c.end_soon(ending.dropped(c.auth.expiry_reason))

    async def _deliver(self) -> None:
        """Forward what the process's reader put in this connection's inbox, until it is
        empty: the events waiting at once in one frame, control messages in their turn."""
        c = self.connection
        inbox = c.groups.inbox
        try:
            while not c.closing:
                size = 0
                messages = inbox.take_now(FRAME_RECORDS)
                if not messages:
                    break  # no await since: nothing can arrive before this task is gone
                for message in messages:
                    if message["type"] == EVENT_TYPE:
                        frame = await event_frame(c, message)
                        if c.closing:  # closed meanwhile: its Close sent `unsent` first
                            return
                        if frame is not None:
                            self.unsent.append(frame)
                            size += len(frame)
                        if size >= FRAME_BYTES:
                            await self.flush()
                            size = 0
                    else:
                        await self.flush()
                        size = 0
                        await dispatch(c, message)
                        if c.closing:
                            return
                await self.flush()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("hub connection failed", extra=c.ids())
            await c.end(ending.SHUTDOWN)
        finally:
            if self.task is asyncio.current_task():
                self.task = None

    async def flush(self) -> None:
        """Send the event frames built and not sent yet (a recovery sends them first)."""
        frames, self.unsent = self.unsent, []  # taken first: a Close meanwhile sends none twice
        await self.emit_many(frames)

    async def send_close(self, close: Frame) -> None:
        """The Close, after the frames built before it (whichever task closes)."""
        with contextlib.suppress(Exception):  # the socket may be gone already
            await self.flush()
        with contextlib.suppress(Exception):
            await self.send(close)

    async def send(self, frame: Frame) -> None:
        """A message outside the sequence (handshake, ping, Close, Ack, Sequence)."""
        c = self.connection
        c.sent()
        transport = c.transport
        if transport is not None:
            await transport.send(frame)

    def write_now(self, frame: Frame) -> None:
        """As send, from code that cannot wait (the clock's pings and Acks): at once
        where the transport writes without waiting (a WebSocket), else in a task."""
        c = self.connection
        c.sent()
        transport = c.transport
        if transport is None:
            return
        if not transport.send_now(frame):
            c.hub.keep(asyncio.ensure_future(transport.send(frame)))

    async def emit(self, frame: Frame) -> None:
        """A hub invocation message (an event, a completion): numbered and kept for a
        resume when stateful (stateful.py)."""
        c = self.connection
        c.sent()
        if c.stateful is not None:
            await c.stateful.emit(frame)
            return
        transport = c.transport
        if transport is not None:
            await transport.send(frame)

    async def emit_many(self, frames: list[Frame]) -> None:
        """Hub invocation messages as one frame (each still numbered when stateful)."""
        if not frames:
            return
        if len(frames) == 1:
            await self.emit(frames[0])
            return
        c = self.connection
        c.sent()
        if c.stateful is not None:
            await c.stateful.emit(*frames)
            return
        transport = c.transport
        if transport is not None:
            await transport.send(join_frames(frames))
