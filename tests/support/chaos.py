"""The chaos soak (bench/chaos.py) run by a test: short runs whose checker must pass."""

import json
import subprocess
import sys
from typing import Any

from tests.support.runtime import ROOT


def chaos_run(*args: str) -> tuple[int, dict[str, Any], str]:
    """bench/chaos.py with its own PostgreSQL and Redis (it starts both): exit status,
    JSON, stderr."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chaos.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "{" in proc.stdout, f"the soak printed no result:\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout[proc.stdout.index("{") :])
    return proc.returncode, result, proc.stderr
