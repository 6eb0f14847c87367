"""The app's wheel, built as CI builds it, and a fresh virtualenv with it installed."""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.runtime import ROOT


def build_wheel(into: Path) -> Path:
    """The app's wheel, built from a copy of the tracked tree (the build writes build/
    and *.egg-info beside the sources) with the pip and setuptools of the test venv."""
    source = into / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*argv, str(source), "-w", str(into)], check=True, capture_output=True)
    (wheel,) = into.glob("messenger_realtime-*.whl")
    return wheel


def venv_with(wheel: Path, venv: Path, *extra: str) -> Path:
    """A new virtualenv (no site packages, nothing of this checkout) with `wheel` and
    `extra` installed from the package index; its bin/ folder."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    done = subprocess.run([*pip, str(wheel), *extra], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin"
