"""The hub's own ServerControls (server.py) for a server that gives only ASGI (Uvicorn,
Hypercorn, a test's): standard messages, sent in order by one task from a bounded buffer.

ASGI's send waits while the server's own buffer is full (a client that does not read),
and the hub must never wait on one client: a write only appends to the connection's
buffer, and one task per connection hands the messages to the server, one at a time, as
it takes them. Past SEND_BUFFER_LIMIT unsent bytes (the buffer and the message the server
is taking) the hub is told once (`overflow`, which ends the connection with
allowReconnect) and what waits is dropped, as long polling drops it: the client is told
by the Close that follows, and resyncs. From then on only the latest write waits (the
connection's last one is its Close), so the buffer never holds more than one message. Nothing here
answers Pings (they reach the application) or knows the protocol: a plain server writes
no message of its own. What the server itself holds is its own to bound (Uvicorn: its
write buffer's high-water mark, and its WebSocket pings, which close a connection whose
client stopped reading).
"""

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any

from messenger_realtime.hub.protocols.base import Frame

Send = Callable[[dict[str, Any]], Awaitable[None]]


class PlainAsgiControls:
    """One connection's writes over ASGI: `deliver` sends one message, `finish` ends the
    connection; both awaited by the connection's writer task only."""

    __slots__ = (
        "_deliver",
        "_finish",
        "_finishing",
        "_in_flight",
        "_limit",
        "_overflow",
        "_pending",
        "_size",
        "_writer",
        "closed",
        "overflowed",
    )

    def __init__(
        self,
        deliver: Callable[[Frame], Awaitable[None]],
        finish: Callable[[], Awaitable[None]],
    ) -> None:
        self._deliver, self._finish = deliver, finish
        self._limit = 0  # no bound until the transport sets one (bound())
        self._overflow: Callable[[int], None] | None = None
        self._pending: collections.deque[Frame] = collections.deque()
        self._size = 0  # bytes in _pending
        self._in_flight = 0  # bytes of the message the server is taking now
        self._writer: asyncio.Task[None] | None = None
        self._finishing = False  # close_after_writes() was called
        self.overflowed = False
        self.closed = False  # the server refused a message: nothing more is sent

    @classmethod
    def websocket(cls, send: Send) -> "PlainAsgiControls":
        """A WebSocket's: `websocket.send` with `text` or `bytes`, then `websocket.close`."""

        async def deliver(frame: Frame) -> None:
            if isinstance(frame, str):
                await send({"type": "websocket.send", "text": frame})
            else:
                await send({"type": "websocket.send", "bytes": frame})

        async def finish() -> None:
            await send({"type": "websocket.close"})

        return cls(deliver, finish)

    def write_now(self, frame: Frame) -> bool:
        if self.closed or self._finishing:
            return True  # a connection that ends takes nothing more, as ASGI's send
        size = len(frame)
        if self.overflowed:
            # Only the latest write waits: the connection ends, and its last write is
            # its Close (what it replaces would not be read before it anyway).
            self._pending.clear()
            self._size = 0
        elif self._limit and self._size + self._in_flight + size > self._limit:
            self.overflowed = True
            unsent = self._size + self._in_flight + size
            self._pending.clear()  # not read before the Close: the client resyncs
            self._size = 0
            if self._overflow is not None:
                self._overflow(unsent)
        self._pending.append(frame)
        self._size += size
        self._wake()
        return True

    def bound(self, limit: int, overflow: Callable[[int], None]) -> None:
        self._limit, self._overflow = limit, overflow

    def unsent(self) -> int:
        return self._size + self._in_flight

    def use_binary(self, binary: bool) -> None:
        """A plain server writes nothing of its own: nothing to tell it."""

    def take_pings(self, heard: Callable[[], None]) -> bool:
        return False  # the client's Pings reach the application

    def stop_reading(self) -> bool:
        return False  # ASGI has no such message: the server reads on (its own flow control)

    def close_after_writes(self) -> bool:
        """End the connection once what was written has gone, without waiting."""
        if not self._finishing:
            self._finishing = True
            self._wake()
        return True

    def _wake(self) -> None:
        if self._writer is None and not self.closed:
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        """Hand the buffer to the server in order, then the end if asked; a server that
        refuses (the socket went) ends it all."""
        try:
            while self._pending and not self.closed:
                frame = self._pending.popleft()
                self._size -= len(frame)
                self._in_flight = len(frame)
                await self._deliver(frame)
                self._in_flight = 0
            if self._finishing and not self.closed:
                self.closed = True
                await self._finish()
        except Exception:  # a send refused: the socket went (its disconnect follows)
            self.closed = True
            self._pending.clear()
            self._size = 0
        finally:
            self._in_flight = 0
            self._writer = None
