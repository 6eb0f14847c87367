"""The worker's own HTTP endpoint: /metrics for Prometheus, /health/live and
/health/ready for Kubernetes probes. Runs in a daemon thread beside the event loop.

live:  the dispatch loop showed a sign of life recently (it beats at least every
       POLLING_INTERVAL, or every batch during a long pass).
ready: the loop is alive and this worker either leads (last pass recent) or stands by
       with a working database session (it will take over if the leader goes).
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from messenger_realtime.dispatch.dispatcher import Dispatcher


def stale_after(dispatcher: Dispatcher) -> float:
    """How long without a heartbeat before the worker counts as stuck."""
    o = dispatcher.options
    return max(10.0, 3 * o.polling_interval + o.max_run_duration + o.publish_timeout)


def health(dispatcher: Dispatcher) -> tuple[bool, bool, dict[str, Any]]:
    age = time.monotonic() - dispatcher.heartbeat
    live = age <= stale_after(dispatcher)
    ready = live and dispatcher.connected and not dispatcher.stop.is_set()
    state = {
        "leading": dispatcher.leading,
        "database": dispatcher.connected,
        "heartbeatAgeSeconds": round(age, 3),
    }
    return live, ready, state


class _Handler(BaseHTTPRequestHandler):
    dispatcher: Dispatcher

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._reply(200, generate_latest(), CONTENT_TYPE_LATEST)
            return
        live, ready, state = health(self.dispatcher)
        checks = {"/health/live": live, "/health/ready": ready}
        if self.path not in checks:
            self._reply(404, b'{"error": "not found"}', "application/json")
            return
        ok = checks[self.path]
        body = json.dumps({"status": "ok" if ok else "unavailable", **state}).encode()
        self._reply(200 if ok else 503, body, "application/json")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would drown the worker's log


def serve(dispatcher: Dispatcher, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"dispatcher": dispatcher})
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, name="worker-http", daemon=True).start()
    return server
