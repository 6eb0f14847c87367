"""Long polling: what a connection sends waits in a bounded queue for the client's next
GET, which gets all of it at once (or an empty 200 after LONG_POLL_TIMEOUT); POSTs carry
what the client sends (transports/http.py).

The first poll opens the connection and is answered at once. A newer poll completes the
pending one with 204. A poll the client abandons leaves the queue as it is. No poll for
DISCONNECT_TIMEOUT ends the connection (hub/connection/timeouts.py); so does a DELETE.
Once the connection ended, the next poll gets what was left (the hub's Close) and the
one after that 204, which the official client takes as the end. Past SEND_BUFFER_LIMIT
queued bytes the connection is closed with allowReconnect, as on the other transports.
"""

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from messenger_realtime.hub.protocols.base import Frame
from messenger_realtime.hub.transports.base import LONG_POLLING

NO_CACHE = [
    (b"cache-control", b"no-cache, no-store"),
    (b"pragma", b"no-cache"),
    (b"expires", b"Thu, 01 Jan 1970 00:00:00 GMT"),
]


class Poll(Protocol):
    """A GET waiting for data (the HTTP consumer that holds it)."""

    async def respond(
        self, status: int, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
    ) -> None: ...


class LongPollingTransport:
    name = LONG_POLLING
    binary_ok = True
    inherent_keepalive = True  # polls are the liveness: no pings, no client timeout

    def __init__(self, options: Any, forget: Callable[[str, object], None]) -> None:
        """`forget`: its process's (HubProcess.forget), called once the connection ended
        and its last poll was answered."""
        self._forget_connection = forget
        self.limit, self.poll_timeout = options.send_buffer_limit, options.long_poll_timeout
        self.disconnect_timeout = options.disconnect_timeout
        self.loop = asyncio.get_running_loop()
        self.pending: list[bytes] = []
        self.size = 0
        self.poll: Poll | None = None
        self.answering: asyncio.Handle | None = None
        self.closed = self.overflowed = False
        self.since: float | None = self.loop.time()
        self.connection: Any = None  # set by the HTTP consumer that opened it
        self._tasks: set[asyncio.Task[Any]] = set()

    async def send(self, frame: Frame) -> None:
        data = frame.encode() if isinstance(frame, str) else frame
        if self.overflowed and not self.connection.closing:
            return  # events sent after the overflow, before the Close: dropped with the rest
        if not self.overflowed and self.size + len(data) > self.limit:
            # The client does not poll fast enough: drop what waits; the Close that
            # follows (allowReconnect) makes it reconnect and resync.
            self.overflowed, unsent = True, self.size + len(data)
            self.pending, self.size = [], 0
            self._spawn(self.connection.send_overflow(unsent))
            return
        self.pending.append(data)
        self.size += len(data)
        if self.poll is not None and self.answering is None:
            # Answer once this turn of the loop is over: what is sent meanwhile joins.
            self.answering = self.loop.call_soon(self._spawn_answer)

    def _spawn_answer(self) -> None:
        self.answering = None
        poll, self.poll = self.poll, None
        if poll is not None:
            self._spawn(self._deliver(poll))

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, poll: Poll) -> None:
        """Everything queued to this poll; 204 when the connection ended with nothing."""
        self.since = self.loop.time()
        if not self.pending and self.closed:
            await poll.respond(204, headers=NO_CACHE)
            self._forget()
            return
        body, self.pending, self.size = b"".join(self.pending), [], 0
        headers = [*NO_CACHE, (b"content-type", b"application/octet-stream")]
        await poll.respond(200, body, [*headers, (b"content-length", str(len(body)).encode())])

    async def take_poll(self, poll: Poll) -> None:
        """A new GET: answer at once if there is something (or nothing ever will be)."""
        previous, self.poll = self.poll, None
        if previous is not None:
            await previous.respond(204, headers=NO_CACHE)  # superseded by this one
        if self.pending or self.closed:
            await self._deliver(poll)
            return
        self.poll, self.since = poll, None
        self.loop.call_later(self.poll_timeout, self._timeout, poll)

    def _timeout(self, poll: Poll) -> None:
        if self.poll is poll:
            self.poll = None
            self._spawn(self._deliver(poll))  # an empty 200: the client polls again

    def poll_gone(self, poll: Poll) -> None:
        """The client abandoned its poll: keep the queue for the next one."""
        if self.poll is poll:
            self.poll, self.since = None, self.loop.time()

    def unsent(self) -> int:
        return self.size  # what waits for the next poll

    async def close(self, *, drop: bool = False) -> None:
        self.closed = True
        if self.poll is not None:
            poll, self.poll = self.poll, None
            await self._deliver(poll)
        if self.pending:  # handed over by the next poll, or dropped after a while
            self.loop.call_later(self.disconnect_timeout, self._forget)

    def terminate(self) -> None:
        """DELETE: nothing more is delivered."""
        self.pending, self.size = [], 0

    def _forget(self) -> None:
        if self.connection is not None:
            self._forget_connection(self.connection.connection_id, self.connection)

    def send_now(self, frame: Frame) -> bool:
        return False  # a write waits on the response (the caller sends in a task)

    def take_pings(self, heard: Callable[[], None]) -> None:
        pass  # the client's Pings reach receive()

    def use_binary(self, binary: bool) -> None:
        """Bodies are bytes either way (octet-stream)."""

    def idle_since(self) -> float | None:
        return self.since

    def lingers(self) -> bool:
        return bool(self.pending)
