"""The worker's /metrics and health server, against a real worker: it listens where the
settings say (loopback by default), serves on one thread of its own, lets go of a
connection that does not send its request in time, and answers a probe at once however
many slow or idle connections are held. Before: it listened on every interface, 300 idle
connections made 303 threads in the worker, and later eight connections that sent a
byte every 1.5 s kept every probe from being answered."""

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from messenger_realtime.ops.health import READ_DEADLINE
from tests.support.api_client import http_get
from tests.support.runtime import free_port, wait_until
from tests.support.workers import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture
def worker(worker_env: dict[str, str]) -> Iterator[tuple[WorkerProcess, int]]:
    port = free_port()
    process = WorkerProcess(worker_env, metrics_port=port)
    yield process, port
    process.kill()


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def listening_address(port: int) -> str:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True)
    return out.stdout.split()[3]  # State, Recv-Q, Send-Q, Local Address:Port, ...


def test_the_worker_s_http_server_is_bound_to_loopback_and_bounded(
    worker: tuple[WorkerProcess, int],
) -> None:
    process, port = worker
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(f"{url}/health/live")[0] == 200, what="the worker's server")
    assert listening_address(port) == f"127.0.0.1:{port}"
    before = threads(process.proc.pid)
    with contextlib.ExitStack() as stack:
        idle = [
            stack.enter_context(socket.create_connection(("127.0.0.1", port))) for _ in range(300)
        ]
        # No thread per connection, and the probe is answered at once all the same.
        assert threads(process.proc.pid) <= before
        assert http_get(f"{url}/health/live", timeout=1)[0] == 200
        last = idle[-1]  # (the first ones may have been let go to make room)
        last.settimeout(READ_DEADLINE * 6)
        assert last.recv(1) == b""  # closed by the server once its deadline passed
    assert threads(process.proc.pid) <= before


def test_connections_that_send_their_request_a_byte_at_a_time_hold_up_no_probe(
    worker: tuple[WorkerProcess, int],
) -> None:
    """Before: eight connections each sending one byte every 1.5 s (within the socket's
    2 s timeout, so never idle) held all eight of the server's threads, and 0 of 10
    /health/live requests were answered: a supervisor would have restarted a healthy
    worker. Now a request's head must arrive whole within READ_DEADLINE, and a probe
    never waits for a slow client."""
    _, port = worker
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(f"{url}/health/live")[0] == 200, what="the worker's server")
    stop = threading.Event()

    def drip(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            for byte in b"GET /health/live HTTP/1.1\r\nHost: x\r\n":
                if stop.wait(1.5):
                    return
                sock.send(bytes([byte]))

    with contextlib.ExitStack() as stack:
        slow = [
            stack.enter_context(socket.create_connection(("127.0.0.1", port))) for _ in range(8)
        ]
        drips = [threading.Thread(target=drip, args=(sock,), daemon=True) for sock in slow]
        for thread in drips:
            thread.start()
        answered = []
        for _ in range(10):
            started = time.monotonic()
            status = http_get(f"{url}/health/live", timeout=1)[0]
            answered.append(status == 200 and time.monotonic() - started < 1)
            time.sleep(0.3)
        stop.set()
        for thread in drips:
            thread.join()
    assert answered == [True] * 10
