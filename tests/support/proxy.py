"""A TCP proxy a test can cut and restore: makes a real PostgreSQL, Redis or hub
unreachable for one process without touching the server itself, drops a client's
connections without a close (as a network blip would), or holds new connections back."""

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.holding = False
        self.accepted = 0  # connections accepted so far
        self._held: list[socket.socket] = []
        self._conns: list[socket.socket] = []
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
        with self._lock:
            self._conns += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    def drop(self) -> None:
        """End every proxied connection, both ways, with no WebSocket close (each end
        sees a dropped connection: code 1006); new connections are still accepted."""
        with self._lock:
            conns, self._conns = self._conns, []
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
        for client in held:
            client.close()
        self.listener.close()


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy one direction of a proxied connection until either end closes, then close
    both ways (the other direction's copy ends with it)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
