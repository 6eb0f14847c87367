"""The benchmark keeps working: a seconds-long smoke (the figures come from full runs)."""

import json
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow


def test_bench_smoke_runs_every_scenario(worker_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick"],
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout[proc.stdout.index("{") :])
    for key in (
        "raw_sql_rows_per_s",
        "noop_rows_per_s",
        "layer_rows_per_s",
        "rowwise_group_send_per_s",
        "idle_wake_median_ms",
    ):
        assert results[key] > 0, key
