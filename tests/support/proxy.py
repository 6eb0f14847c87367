"""A TCP proxy a test can cut and restore: makes a real PostgreSQL, Redis or hub
unreachable for one process without touching the server itself, drops a client's
connections without a close (as a network blip would), holds new connections back, or
makes the open ones silent (as a NAT or load balancer that forgot a flow would).

A silent flow is what a process cannot tell from a slow peer by TCP alone here: the
process's kernel talks to the proxy's on loopback, which acknowledges every byte, so
neither TCP keepalives nor TCP_USER_TIMEOUT ever fire. What notices it is the process's
own bound on a reply (a command timeout, a probe), which is what the tests exercise."""

import contextlib
import queue
import socket
import threading
import time


class Flow:
    """One proxied connection: its two sockets, and whether it went silent."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.sockets = (client, upstream)
        self.silent = threading.Event()


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.holding = False
        self.accepted = 0  # connections accepted so far
        self.delay = 0.0  # seconds added to every byte's way, each direction (new flows)
        self._held: list[socket.socket] = []
        self._conns: list[socket.socket] = []
        self._flows: list[Flow] = []
        self._silenced: list[Flow] = []  # kept open, forwarding nothing, until close()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                if self.open and self.holding:
                    self._held.append(client)
                    continue
            if not self.open:
                client.close()
                continue
            self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        flow = Flow(client, upstream)
        with self._lock:
            self._conns += [client, upstream]
            self._flows.append(flow)
        for a, b in ((client, upstream), (upstream, client)):
            if self.delay > 0:
                delayed_pipe(a, b, self.delay)
            else:
                threading.Thread(target=pipe, args=(a, b, flow), daemon=True).start()

    def silence(self) -> int:
        """Make every open proxied connection silent, both ways: bytes from either end
        are read and discarded, nothing is forwarded, and neither end gets a FIN or an
        RST (the sockets stay open until close(), even when an end closes its own). New
        connections are still forwarded. Returns how many connections went silent."""
        with self._lock:
            flows, self._flows = self._flows, []
            silenced = {id(s) for flow in flows for s in flow.sockets}
            self._conns = [c for c in self._conns if id(c) not in silenced]
            self._silenced += flows
        for flow in flows:
            flow.silent.set()
        return len(flows)

    def drop(self) -> None:
        """End every proxied connection, both ways, with no WebSocket close (each end
        sees a dropped connection: code 1006); new connections are still accepted."""
        with self._lock:
            conns, self._conns, self._flows = self._conns, [], []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def cut(self) -> None:
        """Drop every proxied connection and refuse new ones."""
        self.open = False
        self.drop()

    def restore(self) -> None:
        self.open = True

    def hold(self) -> None:
        """Accept new connections but keep them from the target until release()."""
        self.holding = True

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def release(self) -> None:
        with self._lock:
            self.holding, held, self._held = False, self._held, []
        for client in held:
            self._forward(client)

    def close(self) -> None:
        self.cut()
        with self._lock:
            held, self._held = self._held, []
            silenced, self._silenced = self._silenced, []
        for client in held:
            client.close()
        for flow in silenced:
            for conn in flow.sockets:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        self.listener.close()


def pipe(source: socket.socket, sink: socket.socket, flow: Flow | None = None) -> None:
    """Copy one direction of a proxied connection until either end closes, then close
    both ways (the other direction's copy ends with it). Once the flow is silent, what
    comes is discarded, and an end that closes is not told to the other."""
    try:
        while data := source.recv(65536):
            if flow is not None and flow.silent.is_set():
                continue  # a lost flow: nothing arrives, nothing is refused
            sink.sendall(data)
    except OSError:
        pass
    finally:
        if flow is None or not flow.silent.is_set():
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def delayed_pipe(source: socket.socket, sink: socket.socket, delay: float) -> None:
    """Copy one direction `delay` seconds late, in order (a long link, without netem):
    a reader thread stamps what arrives, a writer thread sends each chunk when due."""
    chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def read() -> None:
        try:
            while data := source.recv(65536):
                chunks.put((time.monotonic() + delay, data))
        except OSError:
            pass
        chunks.put((time.monotonic() + delay, b""))

    def write() -> None:
        try:
            while True:
                due, data = chunks.get()
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)  # the link's length, not a synchronisation
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=write, daemon=True).start()
