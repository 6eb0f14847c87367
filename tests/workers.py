"""Real subprocesses (workers, the serve script) observed through their log lines."""

import re
import signal
import subprocess
import threading
import time
from typing import Any

from .conftest import manage


class LoggedProcess:
    """A subprocess whose output lines (stdout and stderr) tests can wait for."""

    def __init__(self, argv: list[str], env: dict[str, str], **popen: Any) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
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
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for index in range(self._cursor, len(self.lines)):
                    if re.search(pattern, self.lines[index]):
                        self._cursor = index + 1
                        return self.lines[index]
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    why = "process exited" if self._eof else f"timed out after {timeout}s"
                    raise AssertionError(f"{why} before a line matching {pattern!r}:\n{self.log()}")
                self._cond.wait(remaining)

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
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class WorkerProcess(LoggedProcess):
    """`manage.py dispatch_realtime` with MESSENGER_REALTIME_* settings and DEBUG logs."""

    def __init__(self, env: dict[str, str], *args: str, **settings: object) -> None:
        env = dict(env, LOG_LEVEL="DEBUG")
        env.update({f"MESSENGER_REALTIME_{k.upper()}": str(v) for k, v in settings.items()})
        super().__init__(manage("dispatch_realtime", *args), env)
