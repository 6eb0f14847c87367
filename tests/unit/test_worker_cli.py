"""`dispatch_realtime --help` documents what an operator needs; exit codes as documented."""

import os
import socket
import subprocess

from messenger_realtime.conf.declared import WORKER, role_keys
from messenger_realtime.conf.settings import env_name
from tests.support.runtime import manage


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        manage("dispatch_realtime", *args),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_lists_every_worker_setting_with_its_env_name_port_signals_and_exit_codes() -> None:
    result = run("--help")
    assert result.returncode == 0
    text = result.stdout
    for key in role_keys(WORKER):
        assert f"env {env_name(key)} " in text, key
    assert "MESSENGER_REALTIME_METRICS_PORT, default 9108" in text
    assert "/metrics, /health/live and /health/ready" in text
    assert "SIGTERM, SIGINT" in text
    for code in ("0  stopped", "1  refused to start", "2  a bad command-line argument"):
        assert code in text


def test_a_bad_argument_exits_2_and_a_busy_metrics_port_exits_1_naming_it() -> None:
    assert run("--sometimes").returncode == 2
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = run("--once", MESSENGER_REALTIME_METRICS_PORT=port)
    assert result.returncode == 1
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in result.stderr
    assert "MESSENGER_REALTIME_METRICS_PORT to a free port" in result.stderr
