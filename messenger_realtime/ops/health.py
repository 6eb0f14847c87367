"""The worker's own HTTP endpoint: /metrics for Prometheus, /health/live and
/health/ready for Kubernetes probes. Runs in a daemon thread beside the event loop.

It listens on METRICS_HOST (loopback unless a scraper in another container needs every
interface), without authentication, so it is bounded like any server facing strangers:
at most MAX_THREADS requests are served at once (a connection past that is closed at
once: probes retry), and a connection that sends nothing for IDLE_TIMEOUT seconds is
let go. Before, 300 idle connections made 303 threads in the worker.

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

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from messenger_realtime.ops import network
from messenger_realtime.ops.exposition import worker_registry

MAX_THREADS = 8  # requests served at once
IDLE_TIMEOUT = 2.0  # seconds a connection may stay silent (a probe asks at once)


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


class HealthHandler(BaseHTTPRequestHandler):
    """GET /metrics, /health/live and /health/ready for one Liveness."""

    liveness: Liveness  # set on the server's handler subclass by serve()
    timeout = IDLE_TIMEOUT  # the connection's socket timeout (socketserver applies it)

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._reply(200, generate_latest(worker_registry()), CONTENT_TYPE_LATEST)
            return
        live, ready, details = self.liveness.state()
        checks = {"/health/live": live, "/health/ready": ready}
        if self.path not in checks:
            self._reply(404, b'{"error": "not found"}', "application/json")
            return
        ok = checks[self.path]
        body = json.dumps({"status": "ok" if ok else "unavailable", **details}).encode()
        self._reply(200 if ok else 503, body, "application/json")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would drown the worker's log


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per request, at most MAX_THREADS at once: past that a connection is
    closed unanswered rather than given a thread."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of probes queues, is not dropped

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_THREADS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class BoundedHTTPServer6(BoundedHTTPServer):
    address_family = socket.AF_INET6


def serve(liveness: Liveness, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve the endpoints on a daemon thread; shutdown() the returned server to stop."""

    class Handler(HealthHandler):
        pass

    Handler.liveness = liveness
    server_class = BoundedHTTPServer6 if ":" in host else BoundedHTTPServer
    server = server_class((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="worker-http", daemon=True).start()
    return server
