"""Real SignalR clients in processes of their own, and the hub (Daphne + worker) they use."""

import json
import shutil
import signal
import sys
from typing import Any

from tests.support.runtime import ROOT, wait_until
from tests.support.workers import DaphneProcess, LoggedProcess, WorkerProcess

CLIENTS = ROOT / "tests" / "support" / "clients"
LIBRARIES = ["@microsoft/signalr", "pysignalr", "signalrcore"]


class Hub:
    """Daphne plus the dispatch worker, on the test database; Daphne can be restarted."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.worker = WorkerProcess(env, polling_interval=0.5)
        self.daphne = DaphneProcess(env)
        self.url = f"{self.daphne.http}/hubs/messenger"

    def restart_daphne(self) -> None:
        """SIGTERM (clients get Close with allowReconnect), then a new Daphne, same port."""
        self.daphne.signal(signal.SIGTERM)
        assert self.daphne.wait() == 0
        port = self.daphne.port
        self.daphne.kill()
        self.daphne = DaphneProcess(self.env, port=port)

    def close(self) -> None:
        self.daphne.kill()
        self.worker.kill()


class TwoHubs:
    """A worker and two Daphne processes on the same database and Redis."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.worker = WorkerProcess(env, polling_interval=0.5)
        self.daphnes = [DaphneProcess(env), DaphneProcess(env)]

    def lines(self, index: int) -> str:
        return "\n".join(self.daphnes[index].lines)

    def holding(self, user: Any) -> int:
        """Which process opened `user`'s connection. Its log line may come a moment after
        the client saw the handshake (the line is read from Daphne's output): wait for it."""
        marks = ["hub connected ConnectionId", f"UserId={user.id}"]

        def holders() -> list[int]:
            lines = [self.daphnes[i].lines for i in (0, 1)]
            return [i for i in (0, 1) if any(all(m in x for m in marks) for x in lines[i])]

        found = wait_until(holders, what=f"the connection log line of user {user.id}")
        assert len(found) == 1, found
        return int(found[0])

    def close(self) -> None:
        for daphne in self.daphnes:
            daphne.kill()
        self.worker.kill()


class HubClient(LoggedProcess):
    """One of the real clients in a process of its own; its output is JSON lines."""

    def __init__(
        self,
        library: str,
        url: str,
        token: str,
        env: dict[str, str],
        options: dict[str, Any] | None = None,
    ) -> None:
        """options: the official client's (node_client.mjs): stateful, transport, ..."""
        if library == "@microsoft/signalr":
            node = shutil.which("node")
            assert node, "node is required (scripts/test installs it on a fresh machine)"
            argv = [node, str(CLIENTS / "node_client.mjs"), url, token, json.dumps(options or {})]
        else:
            argv = [sys.executable, str(CLIENTS / "py_client.py"), library, url, token]
        super().__init__(argv, env, cwd=str(ROOT))

    def next(self, key: str, value: Any = None, timeout: float = 15) -> dict[str, Any]:
        """The next output object that has `key` (equal to `value` when given)."""

        def accept(line: str) -> bool:
            try:
                obj = json.loads(line)
            except ValueError:
                return False  # a library's own log line
            return isinstance(obj, dict) and key in obj and value in (None, obj[key])

        return dict(json.loads(self.wait_line(accept, f"{key}={value}", timeout)))

    def groups(self) -> list[str]:
        self.send_line("groups")
        return list(self.next("groups")["groups"])

    def recover(self, offsets: dict[str, int], timeout: float = 15) -> dict[str, str]:
        """Invoke Recover (stream -> last offset held); its result (node client only)."""
        self.send_line("recover " + json.dumps(offsets))
        return dict(self.next("recovered", timeout=timeout)["recovered"])

    def watch(self, users: list[Any], timeout: float = 15) -> dict[str, Any]:
        """Invoke WatchPresence (again after each reconnect); its result (node client)."""
        self.send_line("watch " + json.dumps([str(u.id) for u in users]))
        return dict(self.next("watching", timeout=timeout)["watching"])

    def stream_events(self, stream: str) -> list[dict[str, Any]]:
        """Every event received so far on `stream`, as {"event", "payload"}, in order."""
        return [e for e in self.outputs("event") if e["payload"].get("stream") == stream]

    def message(self) -> dict[str, Any]:
        return dict(self.next("event", "message_received")["payload"])

    def outputs(self, key: str) -> list[dict[str, Any]]:
        """Every output object so far that has `key` (the cursor of next() stays put)."""
        found = []
        for line in list(self.lines):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and key in obj:
                found.append(obj)
        return found
