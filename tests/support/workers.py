"""Real subprocesses (workers, the serve script) observed through their log lines."""

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.runtime import free_port, manage


class LoggedProcess:
    """A subprocess whose output lines (stdout and stderr) tests can wait for."""

    def __init__(self, argv: list[str], env: dict[str, str], **popen: Any) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            **popen,
        )
        self.lines: list[str] = []
        self._eof = False
        self._cursor = 0  # wait_for() looks at lines after its previous match
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 20.0) -> str:
        """Block until a log line after the previous match matches `pattern` (a regex)."""
        return self.wait_line(lambda line: re.search(pattern, line) is not None, pattern, timeout)

    def wait_line(self, accept: Callable[[str], bool], what: str, timeout: float = 20.0) -> str:
        """Block until a line after the previous match is accepted; return it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for index in range(self._cursor, len(self.lines)):
                    if accept(self.lines[index]):
                        self._cursor = index + 1
                        return self.lines[index]
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    why = "process exited" if self._eof else f"timed out after {timeout}s"
                    raise AssertionError(f"{why} before a line matching {what!r}:\n{self.log()}")
                self._cond.wait(remaining)

    def forget_lines(self, through: str | None = None, timeout: float = 20.0) -> None:
        """Drop the lines so far (with `through`, a regex: up to the next line matching it,
        waited for); wait_for() starts afresh. A process handed on to the next test
        (tests/support/shared.py) shows that test only what it logs from then on."""
        if through is not None:
            self.wait_for(through, timeout)
        with self._cond:
            del self.lines[: self._cursor if through is not None else len(self.lines)]
            self._cursor = 0

    def send_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def log(self) -> str:
        return "\n".join(self.lines[-80:])

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Kill if still running and release the pipe (test teardown)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class WorkerProcess(LoggedProcess):
    """`manage.py dispatch_realtime` with MESSENGER_REALTIME_* settings and DEBUG logs."""

    def __init__(self, env: dict[str, str], *args: str, **settings: object) -> None:
        env = dict(env, LOG_LEVEL="DEBUG", MESSENGER_REALTIME_METRICS_PORT="0")
        env.update({f"MESSENGER_REALTIME_{k.upper()}": str(v) for k, v in settings.items()})
        super().__init__(manage("dispatch_realtime", *args), env)

    def wait_until_exit_or(self, done: Callable[[], bool], timeout: float) -> int | None:
        """The exit code once the worker exits, or None once `done()` holds first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                if done():
                    return None
        raise AssertionError(f"worker neither exited nor finished in {timeout}s:\n{self.log()}")


class DaphneProcess(LoggedProcess):
    """Daphne serving project.asgi (or `application`) on a free loopback port."""

    def __init__(
        self,
        env: dict[str, str],
        port: int | None = None,
        application: str = "project.asgi:application",
        **settings: object,
    ) -> None:
        env = dict(env)
        env.update({f"MESSENGER_REALTIME_{k.upper()}": str(v) for k, v in settings.items()})
        self.port = port or free_port()
        daphne = str(Path(sys.executable).with_name("daphne"))
        # As scripts/serve: Daphne's WebSocket limits just above the hub's MAX_MESSAGE_SIZE.
        limit = str(int(str(settings.get("max_message_size", 32 * 1024))) + 1024)
        argv = [daphne, "-b", "127.0.0.1", "-p", str(self.port)]
        argv += ["--websocket-max-frame-size", limit, "--websocket-max-message-size", limit]
        argv += [application]
        super().__init__(argv, env)
        self.wait_for("Listening on TCP address", timeout=30)

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


class UvicornProcess(LoggedProcess):
    """Uvicorn serving project.asgi (or `application`) on a free loopback port: a plain
    ASGI server, which gives the hub none of Daphne's controls (the hub falls back to
    standard ASGI messages and its own bounded buffers: hub/transports/plain_asgi.py).
    Speaks for the same tests as a DaphneProcess: `port`, `http`, `ws`, its log lines."""

    def __init__(
        self,
        env: dict[str, str],
        port: int | None = None,
        application: str = "project.asgi:application",
        **settings: object,
    ) -> None:
        env = dict(env)
        env.update({f"MESSENGER_REALTIME_{k.upper()}": str(v) for k, v in settings.items()})
        self.port = port or free_port()
        argv = [sys.executable, "-m", "uvicorn", application, "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "--lifespan", "off"]
        super().__init__(argv, env)
        try:
            self.wait_for("Uvicorn running on", timeout=30)
        except BaseException:
            self.kill()  # the fixture's teardown never sees an object that failed to start
            raise

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


# A served hub the wire helpers (tests/support/wire.py) speak to, whichever server.
HubServer = DaphneProcess | UvicornProcess

LOCK_KEY = "job:scheduled:messenger-realtime-dispatch"  # the default LOCK_KEY


def lock_holders(lock_key: str = LOCK_KEY) -> list[int]:
    """Backend pids holding the dispatch lock in this test database (advisory locks are
    per database: other databases' workers hold their own)."""
    from django.db import connection

    from messenger_realtime.dispatch.lease import advisory_key

    key = advisory_key(lock_key)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid::bigint = (%s >> 32) & 4294967295 AND objid::bigint = %s & 4294967295",
            [key, key],
        )
        return [pid for (pid,) in cur.fetchall()]
