"""Plain helpers for every tier: paths, free ports, waiting on state, private servers."""

import asyncio
import inspect
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listen_backlog(port: int) -> int:
    """The backlog of the socket listening on loopback `port` (a listener's Send-Q in
    `ss`: how many connections the kernel queues for it to accept)."""
    out = subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[2])  # State, Recv-Q, Send-Q, ...


def somaxconn() -> int:
    """The kernel's cap on any listen backlog."""
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


def wait_until(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll a condition with a deadline (synchronisation on state, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


async def _awaited(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def await_until(
    predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition"
) -> float:
    """wait_until for a coroutine: poll a condition other tasks bring about, without
    blocking their loop; the seconds it took (a test failure past `timeout`, not a hang).
    The predicate may return an awaitable (a query on an async connection): awaited."""
    began = time.monotonic()
    while not await _awaited(predicate()):
        if time.monotonic() - began > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)
    return time.monotonic() - began


# How long the tasks a scenario leaves get to end once cancelled (a test's own bound).
CANCEL_BOUND = 10.0


def run(coro: Any) -> Any:
    """asyncio.run(coro), with a bound on the cleanup: asyncio.run waits for ever for the
    tasks left running to end once cancelled, so one that ignores its cancellation would
    turn the scenario's own failure into pytest-timeout's, its assertion never shown. A
    task still running CANCEL_BOUND after its cancel fails the test by name."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    stuck: set[asyncio.Task[Any]] = set()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            where = {task: _stack(task) for task in left}  # where each was when cancelled
            for task in left:
                task.cancel()
            if left:
                _, stuck = loop.run_until_complete(asyncio.wait(left, timeout=CANCEL_BOUND))
            if not stuck:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
        if stuck and sys.exc_info()[0] is None:  # else the scenario's own failure shows
            named = [f"{task!r}, cancelled at:\n{where[task]}" for task in stuck]
            raise AssertionError(f"tasks ignored their cancellation: {sorted(named)}")


def _stack(task: "asyncio.Task[Any]") -> str:
    """Where a task waits now (its coroutine's frames), for a failure's message."""
    out = io.StringIO()
    task.print_stack(limit=12, file=out)
    return out.getvalue()


class PrivateRedis:
    """A redis-server of the test's own, so a test may pause or stop it."""

    def __init__(
        self, port: int, process: subprocess.Popen[bytes], argv: list[str] | None = None
    ) -> None:
        self.port = port
        self.process = process
        self.argv = argv  # how it was started: restart() starts it so again
        self.url = f"redis://127.0.0.1:{port}/0"

    def client(self) -> "redis.Redis[bytes]":
        return redis.Redis(host="127.0.0.1", port=self.port)

    def freeze(self) -> None:
        """Stop the server process: connections stay open, every command hangs."""
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()

    def restart(self) -> None:
        """Kill it and start it again on its port: it answers, and remembers nothing."""
        assert self.argv is not None, "started without its argv"
        self.stop()
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL)

        def answers() -> bool:
            try:
                with self.client() as client:
                    return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(answers, what="restarted redis-server")


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def project_settings(expression: str, **env: str) -> Any:
    """`expression` (over django.conf.settings) as project/settings.py computes it in a
    fresh process with this environment: settings read the environment at import. A
    class in it comes back as its name."""
    code = (
        "import json, django; django.setup(); from django.conf import settings;"
        f"print(json.dumps({expression}, default=lambda o: o.__name__))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return json.loads(out)


def start_private_redis() -> PrivateRedis:
    """A redis-server of the test's own on a free port, without persistence; answering."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is required (scripts/test installs it on a fresh machine)")
    port = free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly"]
    argv += ["no", "--daemonize", "no"]
    server = PrivateRedis(port, subprocess.Popen(argv, stdout=subprocess.DEVNULL), argv)

    def answers() -> bool:
        try:
            return bool(server.client().ping())
        except redis.ConnectionError:
            return False

    try:
        wait_until(answers, what="private redis-server")
    except BaseException:
        server.stop()
        raise
    return server


def private_redis_servers(count: int) -> Iterator[list[PrivateRedis]]:
    """`count` private redis-servers for a fixture (`yield from`), stopped after it."""
    servers: list[PrivateRedis] = []
    try:
        for _ in range(count):
            servers.append(start_private_redis())
        yield servers
    finally:
        for server in servers:
            server.stop()
