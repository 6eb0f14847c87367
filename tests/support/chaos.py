"""The chaos soak (bench/chaos.py) run by a test: short runs whose checker must pass."""

import json
import os
import signal
import subprocess
import sys
from typing import Any

from tests.support.runtime import ROOT


def chaos_run(*args: str, timeout: float = 540) -> tuple[int, dict[str, Any], str]:
    """bench/chaos.py with its own PostgreSQL and Redis (it starts both): exit status,
    JSON, stderr. Interrupted (SIGINT: it stops what it started) when `timeout` passes
    or the test is (pytest-timeout), killed with its process group if it does not end."""
    argv = [sys.executable, str(ROOT / "bench" / "chaos.py"), *args]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise
    assert "{" in stdout, f"the soak printed no result:\n{stderr[-3000:]}"
    result: dict[str, Any] = json.loads(stdout[stdout.index("{") :])
    return proc.returncode, result, stderr
