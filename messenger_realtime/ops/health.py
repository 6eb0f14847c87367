"""The worker's own HTTP endpoint: /metrics for Prometheus, /health/live and
/health/ready for Kubernetes probes. Served by an event loop on a daemon thread of its
own, beside the worker's.

It listens on METRICS_HOST (loopback unless a scraper in another container needs every
interface), without authentication, so it is bounded like any server facing strangers:
one thread whatever the clients do; a request's head (its line and headers: GET has no
body) must arrive whole within READ_DEADLINE and be at most MAX_HEAD bytes, and its
answer be taken within WRITE_DEADLINE, else the connection is let go; at most
MAX_CONNECTIONS are held, and past that the one held longest is dropped to make room
for the newest (a probe connects and asks at once). One request per connection
(`Connection: close`). Before: a thread per request, eight at most, which eight clients
sending a byte every 1.5 s held for good, so no probe was answered (issue 56); and
before that, 300 idle connections made 303 threads.

live:  the dispatch loop showed a sign of life recently (it beats at least every
       POLLING_INTERVAL, or every batch during a long pass), and no wait on PostgreSQL
       or Redis has outlived twice NETWORK_TIMEOUT (ops/network.py: the bound that
       should have ended it failed); the answer names what stalled ("stalled").
ready: the loop is alive and this worker either leads or stands by with a working
       database session (it will take over if the leader goes), its pushes reach the
       channel layer (not ready while they fail: "channelLayerError" says why, in
       redis-py's words; ready again once one passes), and it is not stopping.

The worker reports into a Liveness object; this module knows nothing of the worker.
"""

import asyncio
import collections
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from messenger_realtime.ops import network
from messenger_realtime.ops.exposition import worker_registry

READ_DEADLINE = 2.0  # seconds for a request's head to arrive whole (a probe sends it at once)
WRITE_DEADLINE = 2.0  # seconds for the answer to be taken
MAX_HEAD = 8192  # bytes of a request's line and headers
MAX_CONNECTIONS = 64  # held at once; past it the longest held is dropped
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
REASONS[503] = "Service Unavailable"
JSON = "application/json"


@dataclass
class Liveness:
    """Signs of life a worker reports, read by the probes from another thread."""

    stale_after: float  # seconds without a beat before the worker counts as stuck
    stopping: Callable[[], bool] = lambda: False
    leading: bool = False
    connected: bool = False  # a working database session (leading or standing by)
    cause: str | None = None  # why not, psycopg's words (database_cause: no password)
    # Why pushes fail now (None: they pass), redis-py's words (dispatch/push.py).
    layer_trouble: Callable[[], str | None] = lambda: None
    heartbeat: float = field(default_factory=time.monotonic)

    def beat(self) -> None:
        self.heartbeat = time.monotonic()

    def state(self) -> tuple[bool, bool, dict[str, Any]]:
        """(live, ready, details) as the probes report them."""
        age = time.monotonic() - self.heartbeat
        stalled = network.WAITS.wedged()
        live = age <= self.stale_after and not stalled
        layer_error = self.layer_trouble()
        ready = live and self.connected and layer_error is None and not self.stopping()
        details: dict[str, Any] = {
            "leading": self.leading,
            "database": self.connected,
            "channelLayer": layer_error is None,
            "heartbeatAgeSeconds": round(age, 3),
        }
        if layer_error is not None:
            details["channelLayerError"] = layer_error
        if stalled:
            details["stalled"] = stalled  # dependency -> seconds its wait is overdue
        if not self.connected and self.cause:
            details["databaseError"] = self.cause
        return live, ready, details


class LivenessGroup(Liveness):
    """A partitioned worker's signs of life (DISPATCH_PARTITIONS > 1): live and ready when
    every partition's loop is, plus the partitions this worker leads."""

    def __init__(self, members: list[Liveness], led: Callable[[], list[int]]) -> None:
        super().__init__(stale_after=max(m.stale_after for m in members))
        self.members, self.led = members, led

    def state(self) -> tuple[bool, bool, dict[str, Any]]:
        states = [member.state() for member in self.members]
        details = {
            "leading": any(d["leading"] for _, _, d in states),
            "partitionsLed": self.led(),
            "database": all(d["database"] for _, _, d in states),
            "channelLayer": all(d["channelLayer"] for _, _, d in states),
            "heartbeatAgeSeconds": max(d["heartbeatAgeSeconds"] for _, _, d in states),
        }
        stalled = [d["stalled"] for _, _, d in states if "stalled" in d]
        if stalled:
            details["stalled"] = stalled[0]
        for error in ("databaseError", "channelLayerError"):
            causes = [d[error] for _, _, d in states if error in d]
            if causes:
                details[error] = causes[0]
        return all(s[0] for s in states), all(s[1] for s in states), details


def answer(liveness: Liveness, method: str, path: str) -> tuple[int, bytes, str]:
    """(status, body, content type) of a request for `path`."""
    if method != "GET":
        return 405, b'{"error": "GET only"}', JSON
    if path == "/metrics":
        return 200, generate_latest(worker_registry()), CONTENT_TYPE_LATEST
    live, ready, details = liveness.state()
    checks = {"/health/live": live, "/health/ready": ready}
    if path not in checks:
        return 404, b'{"error": "not found"}', JSON
    ok = checks[path]
    body = json.dumps({"status": "ok" if ok else "unavailable", **details}).encode()
    return (200 if ok else 503), body, JSON


def response(status: int, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    )
    if status == 405:
        head += "Allow: GET\r\n"
    return (head + "\r\n").encode() + body


class HealthServer:
    """The endpoints of one Liveness on a listening socket, served by an event loop on a
    daemon thread; shutdown() stops it."""

    def __init__(self, liveness: Liveness, sock: socket.socket) -> None:
        self.liveness = liveness
        self._held: collections.OrderedDict[asyncio.StreamWriter, None] = collections.OrderedDict()
        self._loop = asyncio.new_event_loop()
        self._stopped = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(
            target=self._run, args=(sock,), name="worker-http", daemon=True
        )
        self._thread.start()

    def shutdown(self) -> None:
        """Stop serving and wait (at most 5 s) for the thread to end."""
        if not self._stopped.is_set():
            # Its loop may close between the check and the call (it stopped by itself).
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop_serving)
            self._thread.join(timeout=5)

    def _run(self, sock: socket.socket) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            # A shutdown() may come before the server even started: cancelled, not an error.
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(self._serve(sock))
        finally:
            sock.close()  # (the server closed it already, unless stopped before it started)
            self._loop.close()
            self._stopped.set()

    async def _serve(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_server(self._handle, sock=sock, limit=MAX_HEAD)
        with contextlib.suppress(asyncio.CancelledError):
            await self._server.serve_forever()
        for writer in list(self._held):
            writer.transport.abort()

    def _stop_serving(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held = self._held
        held[writer] = None
        while len(held) > MAX_CONNECTIONS:  # the longest held makes room for the newest
            oldest, _ = held.popitem(last=False)
            oldest.transport.abort()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_DEADLINE)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(request_line) != 3 or not request_line[2].startswith("HTTP/"):
                status, body, kind = 400, b'{"error": "bad request"}', JSON
            else:
                method, path = request_line[0], request_line[1].split("?", 1)[0]
                status, body, kind = answer(self.liveness, method, path)
            writer.write(response(status, body, kind))
            await asyncio.wait_for(writer.drain(), WRITE_DEADLINE)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.transport.abort()  # too slow, too long, or gone: let it go unanswered
        finally:
            held.pop(writer, None)
            writer.close()


def serve(liveness: Liveness, port: int, host: str = "127.0.0.1") -> HealthServer:
    """Serve the endpoints on a daemon thread; shutdown() the returned server to stop.
    OSError here when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)  # a burst of probes queues, is not dropped
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return HealthServer(liveness, sock)
