"""A TCP proxy a test can cut and restore: makes a real PostgreSQL, Redis or hub
unreachable for one process without touching the server itself, drops a client's
connections without a close (as a network blip would), holds new connections back, or
makes the open ones silent (as a NAT or load balancer that forgot a flow would). It can
also partition (hold every byte, both ways, and every new connection, until heal(): what
was held then arrives, as TCP's retransmissions would deliver it) and add latency to every
flow, open or new (`delay`, changed at any time: a long link, without netem).

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
        self.ended = threading.Event()  # shut down both ways (an end closed, or drop())
        self._writers_left = 2
        self._lock = threading.Lock()

    def writer_done(self) -> None:
        """Both ways shut down; once both writers are done, the sockets are closed."""
        self.ended.set()
        with self._lock:
            self._writers_left -= 1
            last = self._writers_left == 0
        if last:
            for s in self.sockets:
                s.close()


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.holding = False
        self.accepted = 0  # connections accepted so far
        self.delay = 0.0  # seconds added to every byte's way, each direction (any flow)
        self.flowing = threading.Event()  # cleared while partitioned: bytes are held
        self.flowing.set()
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
            ended = {id(s) for f in self._flows if f.ended.is_set() for s in f.sockets}
            self._flows = [f for f in self._flows if not f.ended.is_set()]
            self._conns = [c for c in self._conns if id(c) not in ended] + [client, upstream]
            self._flows.append(flow)
        for a, b in ((client, upstream), (upstream, client)):
            Direction(a, b, flow, self).start()

    def open_flows(self) -> int:
        """Connections forwarded now (neither silenced nor ended by drop)."""
        with self._lock:
            return sum(1 for flow in self._flows if not flow.ended.is_set())

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

    def partition(self) -> None:
        """Hold every byte of every open connection, both ways, and every new connection,
        until heal(): no FIN, no RST, nothing lost."""
        self.hold()
        self.flowing.clear()

    def heal(self) -> None:
        """End a partition: what was held is delivered, in order; held connections go on."""
        self.flowing.set()
        self.release()

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
        self.flowing.set()  # a direction held by a partition ends with its sockets
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


class Direction:
    """One direction of a proxied connection: a reader stamps each chunk with the time it
    is due (now + the proxy's delay), a writer sends it then, in order, once the proxy is
    not partitioned. Either end closing closes both ways, unless the flow went silent:
    then what comes is discarded and an end that closes is not told to the other."""

    def __init__(
        self, source: socket.socket, sink: socket.socket, flow: Flow, proxy: TcpProxy
    ) -> None:
        self.source, self.sink, self.flow, self.proxy = source, sink, flow, proxy
        self.chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        try:
            while data := self.source.recv(65536):
                if not self.flow.silent.is_set():  # a lost flow: nothing arrives
                    self.chunks.put((time.monotonic() + self.proxy.delay, data))
        except OSError:
            pass
        self.chunks.put((time.monotonic() + self.proxy.delay, b""))

    def _write(self) -> None:
        try:
            while True:
                due, data = self.chunks.get()
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)  # the link's length, not a synchronisation
                self.proxy.flowing.wait()  # a partition holds it here until heal()
                if self.flow.silent.is_set():
                    if data:
                        continue  # discarded
                    return  # an end closed: the other is not told
                if not data:
                    break
                self.sink.sendall(data)
        except OSError:
            pass
        for s in (self.source, self.sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.flow.writer_done()


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy one direction of a plain relay (tests/support/balancer.py) until either end
    closes, then close both ways (the other direction's copy ends with it)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
