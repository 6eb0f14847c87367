"""promtool (Debian's `prometheus` package; scripts/test installs it) for rule tests."""

import shutil
import subprocess

import pytest

from tests.support.runtime import ROOT


def promtool() -> str:
    """promtool's path; a missing promtool fails the test (scripts/test installs it)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not on PATH: scripts/test installs it from the Debian package "
            "`prometheus` (apt-get install prometheus)",
            pytrace=False,
        )
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
