"""The worker's /metrics and health server, against a real worker: it listens where the
settings say (loopback by default), serves with a bounded number of threads, and lets go
of a connection that stays idle. Before: it listened on every interface, and 300 idle
connections made 303 threads in the worker."""

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from messenger_realtime.ops.health import IDLE_TIMEOUT, MAX_THREADS
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
        # Each idle connection would hold a thread of its own: at most MAX_THREADS do.
        assert threads(process.proc.pid) <= before + MAX_THREADS
        # The probe still answers once the idle ones are let go (IDLE_TIMEOUT).
        wait_until(
            lambda: http_get(f"{url}/health/live", timeout=1)[0] == 200,
            timeout=IDLE_TIMEOUT * 6,
            what="the probe past idle connections",
        )
        first = idle[0]
        first.settimeout(IDLE_TIMEOUT * 6)
        assert first.recv(1) == b""  # closed by the server, not held forever
    wait_until(lambda: threads(process.proc.pid) <= before + 1, what="the threads to end")
