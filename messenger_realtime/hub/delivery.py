"""Server to client: what the process's reader put in a connection's inbox goes out, the
events waiting at once in one frame. A mixin of HubConnection.

The frames built for a batch wait in `unsent` until the batch's frame is full or done.
A connection closed meanwhile (its credentials expired while an event's membership read
ran, ops' disconnect, an overrun, ...) sends them before its Close (_send_close): they
were checked while the connection could still have them. What the batch holds after them
is not sent, and the Close (with allowReconnect, but for a logout or a protocol error)
is how the client learns to resync.
"""

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from messenger_realtime.hub.events import EVENT_TYPE
from messenger_realtime.hub.inbox import Inbox
from messenger_realtime.hub.protocols.base import Frame, join_frames
from messenger_realtime.hub.transports.base import Transport

logger = logging.getLogger(__name__)
# Several events waiting for a connection go out in one frame (the protocols allow any
# number of records per frame): at most this many records, or about this many bytes.
FRAME_RECORDS = 100
FRAME_BYTES = 64 * 1024
_WRITES: set["asyncio.Task[None]"] = set()  # write_now's tasks, kept until done


class Delivery:
    closing: bool
    last_sent: float
    transport: Transport | None
    stateful: Any
    delivery: "asyncio.Task[None] | None"  # while it forwards what its inbox holds
    delivering = False  # its inbox's messages go out (handshake answered)
    unsent: list[Frame]  # built for the current batch, not emitted yet

    if TYPE_CHECKING:  # provided by HubConnection and its mixins
        loop: asyncio.AbstractEventLoop
        inbox: Inbox
        last_received: float
        expires_at: float
        expiry_reason: str

        async def _drop(self, reason: str, **fields: Any) -> None: ...

        async def event_frame(self, message: dict[str, Any]) -> Frame | None: ...

        async def dispatch(self, message: dict[str, Any]) -> None: ...

        async def _emit_stateful(self, *frames: Frame) -> None: ...

        async def shutdown(self) -> None: ...

        def _ids(self) -> dict[str, Any]: ...

    def _start_delivery(self) -> None:
        """From now on, what arrives in its inbox goes out (after the handshake; for a
        stateful connection, after the client's first message)."""
        if self.delivering or self.closing:
            return
        self.delivering = True
        self.inbox.start_draining(self._wake_delivery)
        self._take_pings()

    def _wake_delivery(self) -> None:
        """Something arrived in its inbox: a delivery task, unless one runs (it takes
        whatever arrives while it runs, and ends when the inbox is empty)."""
        if self.delivery is None and not self.closing:
            self.delivery = asyncio.create_task(self._deliver())

    def _take_pings(self) -> None:
        """Let the transport take the client's Pings itself, where it can (a WebSocket
        under Daphne: wsprotocol.py), now that a Ping means nothing but `heard`."""
        take = getattr(self.transport, "take_pings", None)
        if take is not None:
            take(self.heard)

    def heard(self) -> None:
        """A Ping the transport took itself: the client is alive (as receive() would
        record it, expiry included)."""
        self.last_received = now = self.loop.time()
        if now >= self.expires_at and not self.closing:
            task = asyncio.ensure_future(self._drop(self.expiry_reason))
            _WRITES.add(task)
            task.add_done_callback(_WRITES.discard)

    async def _deliver(self) -> None:
        """Forward what the process's reader put in this connection's inbox, until it is
        empty: the events waiting at once in one frame, control messages in their turn."""
        inbox = self.inbox
        try:
            while not self.closing:
                size = 0
                messages = inbox.take_now(FRAME_RECORDS)
                if not messages:
                    break  # no await since: nothing can arrive before this task is gone
                for message in messages:
                    if message["type"] == EVENT_TYPE:
                        frame = await self.event_frame(message)
                        if self.closing:  # closed meanwhile: its Close sent `unsent` first
                            return
                        if frame is not None:
                            self.unsent.append(frame)
                            size += len(frame)
                        if size >= FRAME_BYTES:
                            await self._flush_unsent()
                            size = 0
                    else:
                        await self._flush_unsent()
                        size = 0
                        await self.dispatch(message)
                        if self.closing:
                            return
                await self._flush_unsent()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("hub connection failed", extra=self._ids())
            await self.shutdown()
        finally:
            if self.delivery is asyncio.current_task():
                self.delivery = None

    async def _flush_unsent(self) -> None:
        frames, self.unsent = self.unsent, []  # taken first: a Close meanwhile sends none twice
        await self._emit_many(frames)

    async def _send_close(self, close: Frame) -> None:
        """The Close, after the frames built before it (whichever task closes)."""
        with contextlib.suppress(Exception):  # the socket may be gone already
            await self._flush_unsent()
        with contextlib.suppress(Exception):
            await self._send(close)

    async def _send(self, frame: Frame) -> None:
        """A message outside the sequence (handshake, ping, Close, Ack, Sequence)."""
        self.last_sent = self.loop.time()
        transport = self.transport
        if transport is not None:
            await transport.send(frame)

    def write_now(self, frame: Frame) -> None:
        """As _send, from code that cannot wait (the clock's pings and Acks): at once
        where the transport writes without waiting (a WebSocket), else in a task."""
        self.last_sent = self.loop.time()
        transport = self.transport
        if transport is None:
            return
        send_now = getattr(transport, "send_now", None)
        if send_now is not None:
            send_now(frame)
            return
        task = asyncio.ensure_future(transport.send(frame))
        _WRITES.add(task)
        task.add_done_callback(_WRITES.discard)

    async def _emit(self, frame: Frame) -> None:
        """A hub invocation message (an event, a completion): numbered and kept for a
        resume when stateful (resume.py)."""
        self.last_sent = self.loop.time()
        if self.stateful is not None:
            await self._emit_stateful(frame)
            return
        transport = self.transport
        if transport is not None:
            await transport.send(frame)

    async def _emit_many(self, frames: list[Frame]) -> None:
        """Hub invocation messages as one frame (each still numbered when stateful)."""
        if not frames:
            return
        if len(frames) == 1:
            await self._emit(frames[0])
            return
        self.last_sent = self.loop.time()
        if self.stateful is not None:
            await self._emit_stateful(*frames)
            return
        transport = self.transport
        if transport is not None:
            await transport.send(join_frames(frames))
