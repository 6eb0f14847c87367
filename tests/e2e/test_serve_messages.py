"""What `scripts/serve` (one hub) says: "serving on" only once Daphne listens, a taken
port refused by name before anything starts, and a process that ends named with its
exit status (everything then stops)."""

import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.runtime import ROOT, free_port
from tests.support.workers import LoggedProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def serve_env(env: dict[str, str], port: int, local: Path) -> dict[str, str]:
    return dict(
        env,
        HOST="127.0.0.1",
        PORT=str(port),
        MESSENGER_LOCAL_DIR=str(local),
        MESSENGER_REALTIME_METRICS_PORT="0",
        DEMO_ENABLED="false",
    )


@pytest.fixture
def serve(worker_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[LoggedProcess, int]]:
    port = free_port()
    argv = ["bash", "scripts/serve"]
    env = serve_env(worker_env, port, tmp_path / "local")
    process = LoggedProcess(argv, env, cwd=str(ROOT), start_new_session=True)
    try:
        yield process, port
    finally:
        if process.proc.poll() is None:
            os.killpg(process.proc.pid, signal.SIGKILL)
        process.kill()


def test_serving_on_comes_once_daphne_listens(serve: tuple[LoggedProcess, int]) -> None:
    """Before: "serving on" came while Daphne was still importing Django."""
    process, port = serve
    process.wait_for("serving on", timeout=120)
    listening = f"Listening on TCP address 127.0.0.1:{port}"
    lines = list(process.lines)
    served = next(i for i, line in enumerate(lines) if "serving on" in line)
    assert any(listening in line for line in lines[:served]), process.log()


def test_a_process_that_ends_is_named_with_its_status(serve: tuple[LoggedProcess, int]) -> None:
    """Before: serve stopped everything without saying which process ended, or why."""
    process, _ = serve
    process.wait_for("serving on", timeout=120)
    found = [m for line in process.lines if (m := re.search(r"worker: pid (\d+)", line))]
    pid = int(found[0].group(1))
    os.kill(pid, signal.SIGKILL)
    line = process.wait_for(rf"worker \(pid {pid}\) exited", timeout=30)
    assert "status 137" in line and "stopping" in line
    assert process.wait(timeout=60) != 0
    assert sum("exited with status" in line for line in process.lines) == 1, process.log()


def test_a_taken_port_is_refused_by_name_before_anything_starts(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    """Before: "serving on", then Daphne failed to bind and everything stopped unexplained."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            ["bash", "scripts/serve"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=serve_env(worker_env, port, tmp_path / "local"),
            start_new_session=True,
        )
    assert done.returncode == 1
    assert f"port {port} is in use" in done.stderr and "PORT" in done.stderr
    assert "serving on" not in done.stderr
