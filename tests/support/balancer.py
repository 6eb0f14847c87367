"""An HTTP-aware load balancer in front of several hub processes, for tests.

Each TCP connection carries one request (it forces `Connection: close`; a WebSocket
upgrade keeps its connection). Routing is either by the request's `id` query parameter
(sticky: every request of one hub connection reaches the same process, as docs/hub.md
configures nginx) or round robin per connection (what a balancer without that rule
does). It can drop every connection (a network blip) and refuse WebSocket upgrades or
event streams (networks and proxies that block them)."""

import contextlib
import re
import socket
import threading
import zlib
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from tests.support.proxy import pipe

FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True)
class Routed:
    method: str
    path: str  # without its query (no tokens here)
    kind: str  # "websocket", "sse" or "http"
    backend: int  # index into the backends, or -1 when refused here


class Balancer:
    def __init__(self, backends: list[int], *, sticky: bool = True) -> None:
        self.backends, self.sticky = backends, sticky
        self.block_websockets = self.block_sse = False
        self.routed: list[Routed] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._next = 0
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                client.close()
                return
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
        }
        kind = "websocket" if headers.get("upgrade", "").lower() == "websocket" else "http"
        if "text/event-stream" in headers.get("accept", ""):
            kind = "sse"
        url = urlsplit(target)
        if (kind == "websocket" and self.block_websockets) or (kind == "sse" and self.block_sse):
            self._record(Routed(method, url.path, kind, -1))
            client.sendall(FORBIDDEN)
            client.close()
            return
        backend = self._choose(parse_qs(url.query).get("id", [""])[0])
        self._record(Routed(method, url.path, kind, backend))
        if kind != "websocket":  # one request per connection: the next one is routed anew
            kept = [
                line for line in lines[1:] if not re.match(r"(?i)(connection|keep-alive):", line)
            ]
            head = "\r\n".join([lines[0], *kept, "Connection: close"]).encode("latin-1")
        try:
            upstream = socket.create_connection(("127.0.0.1", self.backends[backend]))
        except OSError:
            client.close()
            return
        with self._lock:
            self._conns += [client, upstream]
        upstream.sendall(head + b"\r\n\r\n" + rest)
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def _choose(self, connection_id: str) -> int:
        if self.sticky and connection_id:
            return zlib.crc32(connection_id.encode()) % len(self.backends)
        with self._lock:
            self._next, chosen = self._next + 1, self._next % len(self.backends)
        return chosen

    def _record(self, routed: Routed) -> None:
        with self._lock:
            self.routed.append(routed)

    def drop(self) -> None:
        """End every connection both ways without a WebSocket close (code 1006)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.drop()
        self.listener.close()
