"""`scripts/serve --hubs N` run by a test: the process group, each hub process's own
/metrics and health, and official clients connected through its nginx."""

import os
import re
import signal
import socket
from pathlib import Path
from typing import Any

from tests.support.api_client import Api, http_get, sample
from tests.support.hub_clients import HubClient
from tests.support.hub_helpers import token_for
from tests.support.runtime import ROOT, free_port, wait_until
from tests.support.workers import LoggedProcess

HUBS = 2
CONNECTIONS = "messenger_realtime_hub_connections"


def free_range(count: int) -> int:
    """A port P with P..P+count all free: serve's nginx on P, hub i on P+i."""

    def bindable(port: int) -> bool:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
            return True

    for _ in range(50):
        port = free_port()
        if port + count < 65536 and all(bindable(port + i) for i in range(1, count + 1)):
            return port
    raise AssertionError(f"no {count + 1} free consecutive ports")


class Served:
    """scripts/serve --hubs N in a session (process group) of its own."""

    def __init__(self, env: dict[str, str], local: Path, hubs: int = HUBS) -> None:
        self.port = free_range(hubs)
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(
            env,
            HOST="127.0.0.1",
            PORT=str(self.port),
            MESSENGER_LOCAL_DIR=str(local),  # nginx's config, pid, temp files and logs
            MESSENGER_REALTIME_METRICS_PORT=str(free_port()),
            DEMO_ENABLED="false",
        )
        argv = ["bash", "scripts/serve", "--hubs", str(hubs)]
        self.process = LoggedProcess(argv, env, cwd=str(ROOT), start_new_session=True)
        try:
            self.process.wait_for("serving on", timeout=120)
            for index in range(1, hubs + 1):
                self.listening(index, times=1)
                wait_until(lambda i=index: self.ready(i), what=f"hub {index}")
            # nginx writes its pid file once it listens (the same caution as above).
            wait_until((local / "nginx" / "nginx.pid").exists, what="nginx listening")
            wait_until(lambda: http_get(f"{self.url}/health/live")[0] == 200, what="nginx")
        except BaseException:
            self.kill()  # the fixture's teardown never sees an object that failed to start
            raise

    def hub_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.port + index}"

    def listening(self, index: int, times: int) -> None:
        """Wait until hub `index` has logged that it listens `times` times. (Polling a
        loopback port in the ephemeral range before then may connect the probe to
        itself, which also keeps Daphne from binding it.)"""
        mark = f"Listening on TCP address 127.0.0.1:{self.port + index}"
        count = lambda: sum(mark in line for line in self.process.lines)  # noqa: E731
        wait_until(lambda: count() >= times, timeout=60, what=f"hub {index} listening")

    def ready(self, index: int) -> bool:
        return http_get(f"{self.hub_url(index)}/health/ready", timeout=2)[0] == 200

    def connections(self, index: int) -> int | None:
        """Hub process `index`'s open hub connections (its own /metrics); None if down."""
        status, text = http_get(f"{self.hub_url(index)}/metrics", timeout=2)
        return int(sample(text, CONNECTIONS)) if status == 200 else None

    def hub_pid(self, index: int) -> int:
        """The pid serve last logged for hub `index`."""
        pattern = re.compile(rf"hub {index}: Daphne pid (\d+) ")
        found = [m.group(1) for line in self.process.lines if (m := pattern.search(line))]
        return int(found[-1])

    def kill(self) -> None:
        if self.process.proc.poll() is None:
            os.killpg(self.process.proc.pid, signal.SIGKILL)
        self.process.kill()


class Reader:
    """A chat member with the official client, connected through serve's nginx."""

    def __init__(self, served: Served, user: Any, **options: Any) -> None:
        self.user = user
        self.api = Api(served.url, token_for(user.id))
        url = f"{served.url}/hubs/messenger"
        token, env = token_for(user.id), dict(os.environ)
        self.client = HubClient("@microsoft/signalr", url, token, env, options)
        self.client.next("state", "connected", timeout=30)
        self.hub = 0  # which process holds it (set by the test from the metrics)

    def received(self) -> set[str]:
        events = self.client.outputs("event")
        return {e["payload"]["messageId"] for e in events if e["event"] == "message_received"}

    def states(self) -> list[str]:
        return [o["state"] for o in self.client.outputs("state")]


def connect_on(served: Served, users: list[Any], readers: list[Reader]) -> Reader:
    """Connect the next user and learn from both processes' gauges which one holds it."""
    before = [served.connections(i) or 0 for i in range(1, HUBS + 1)]
    reader = Reader(served, users.pop())
    readers.append(reader)

    def grown() -> list[int]:
        now = [served.connections(i) or 0 for i in range(1, HUBS + 1)]
        return [i + 1 for i in range(HUBS) if now[i] > before[i]]

    (reader.hub,) = wait_until(grown, what="the new connection in a process's gauge")
    return reader
