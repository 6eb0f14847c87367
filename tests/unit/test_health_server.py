"""The worker's HTTP server in-process, on loopback (ops/health.py): it answers the probes
and /metrics, refuses what it does not serve with the right status, lets go of a request
whose head is too long, and stops when asked."""

import contextlib
import socket
from collections.abc import Iterator

import pytest

from messenger_realtime.ops.health import MAX_HEAD, HealthServer, Liveness, serve
from tests.support.runtime import free_port


@pytest.fixture
def server() -> Iterator[tuple[HealthServer, int]]:
    port = free_port()
    liveness = Liveness(stale_after=60.0)
    liveness.connected = True
    running = serve(liveness, port)
    yield running, port
    running.shutdown()


def ask(port: int, request: bytes) -> bytes:
    """What the server sends back for `request`, until it closes ("" when it just does)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            sock.sendall(request)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
        return answer


def test_each_path_and_method_gets_its_status(server: tuple[HealthServer, int]) -> None:
    _, port = server
    live = ask(port, b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    assert live.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in live
    assert b'"status": "ok"' in live
    assert ask(port, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200")
    assert ask(port, b"GET /nope HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    posted = ask(port, b"POST /health/live HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    assert posted.startswith(b"HTTP/1.1 405") and b"Allow: GET" in posted
    assert ask(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_a_head_longer_than_max_head_is_let_go_unanswered(
    server: tuple[HealthServer, int],
) -> None:
    _, port = server
    long_head = b"GET /health/live HTTP/1.1\r\nX-Pad: " + b"x" * MAX_HEAD + b"\r\n\r\n"
    assert ask(port, long_head) == b""
    assert ask(port, b"GET /health/live HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200")


def test_shutdown_stops_it_and_frees_the_port(server: tuple[HealthServer, int]) -> None:
    running, port = server
    running.shutdown()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    running.shutdown()  # a second time: nothing to do, no error
