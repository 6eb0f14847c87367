"""The processes of bench/e2e.py: the hub clients (this file, run as a script), and the
handles e2e.py keeps on them, on the servers (Daphne, the worker) and on their CPU time.

The clients are raw WebSocket connections speaking the SignalR JSON hub protocol
(negotiate, then the handshake), recording when each `message_received` arrives. They run
in processes of their own, so their event loop is not the producer's and their CPU time is
read apart. Driven by JSON lines: the first stdin line is {"http": base URL, "tokens":
[...]} (answer {"ready": connected, "errors": [...]}); then one stdout line per command:
  {"cmd": "until", "unique": N, "idle": S, "limit": L}  wait for N (client, message)
      receipts, S seconds without a new one, or L seconds in all -> {"unique": n}
  {"cmd": "collect"}  receipts since the last collect -> {"receipts": [[id, client, t]...]}
End of stdin closes every connection and ends the process. With "acknowledge": true in
the first line, each client acknowledges what it received as the web client module does
(`Acknowledge`, Acker below), so Daphne measures its deliveries.
"""

import asyncio
import contextlib
import json
import os
import random
import re
import socket
import sys
import tempfile
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any
from uuid import UUID

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parent.parent
RS = "\x1e"
HANDSHAKE = json.dumps({"protocol": "json", "version": 1}) + RS
PING = json.dumps({"type": 6}) + RS
PING_EVERY = 10.0  # the hub drops clients silent for CLIENT_TIMEOUT (30 s)
CONNECT_CONCURRENCY = 25  # 500 simultaneous handshakes would only time out on 2 cores
ACKNOWLEDGE_EVERY = 5.0  # s after the first event, as the web client module's

ACKNOWLEDGE_START = json.dumps({"type": 1, "target": "Acknowledge", "arguments": [{}, 0]}) + RS
PIPE = asyncio.subprocess.PIPE
TICK = os.sysconf("SC_CLK_TCK")  # /proc CPU times are in clock ticks


# -- the client process ---------------------------------------------------------------


class Receipts:
    """Every receipt since the last collect, by message id."""

    def __init__(self) -> None:
        self.by_message: dict[str, list[tuple[int, float]]] = {}
        self.unique = 0
        self.changed = asyncio.Event()

    def add(self, message_id: str, client: int, at: float) -> None:
        seen = self.by_message.setdefault(message_id, [])
        if all(c != client for c, _ in seen):
            self.unique += 1
        seen.append((client, at))
        self.changed.set()

    async def until(self, target: int, idle: float, limit: float) -> int:
        """Wait for `target` unique receipts, or until none arrived for `idle` seconds, or
        `limit` seconds in all."""
        deadline = time.monotonic() + limit
        while self.unique < target and (left := deadline - time.monotonic()) > 0:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(idle, left))
            except TimeoutError:
                break  # idle for `idle` seconds, or out of time
        return self.unique

    def collect(self) -> list[list[Any]]:
        out = [[m, c, t] for m, seen in self.by_message.items() for c, t in seen]
        self.by_message, self.unique = {}, 0
        return out


def negotiate(http: str, token: str) -> str:
    """POST negotiate (version 1): the signed connectionToken for the WebSocket URL."""
    url = f"{http}/hubs/messenger/negotiate?negotiateVersion=1"
    request = urllib.request.Request(url, method="POST", data=b"")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["connectionToken"])


async def open_client(http: str, token: str, gate: asyncio.Semaphore) -> ClientConnection:
    for attempt in range(3):  # as SignalR clients retry a failed start (a busy shared box)
        try:
            return await connect_once(http, token, gate)
        except Exception as exc:
            if attempt == 2:
                raise
            print(f"hub client: retrying after {exc!r}", file=sys.stderr)
            await asyncio.sleep(1 + attempt)
    raise AssertionError("unreachable")


async def connect_once(http: str, token: str, gate: asyncio.Semaphore) -> ClientConnection:
    async with gate:
        connection_token = await asyncio.to_thread(negotiate, http, token)
        url = http.replace("http", "ws", 1) + f"/hubs/messenger?id={connection_token}"
        headers = {"Authorization": f"Bearer {token}"}
        ws = await connect(url, additional_headers=headers, open_timeout=60)
        await ws.send(HANDSHAKE)
        if (answer := await asyncio.wait_for(ws.recv(), 30)) != "{}" + RS:
            raise RuntimeError(f"handshake refused: {answer!r}")
        return ws


class Acker:
    """Acknowledges a connection's events as the web client module does: the offsets held
    per stream and the ms since it had the first event it acknowledges, ACKNOWLEDGE_EVERY
    after that first event."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.held: dict[str, int] = {}
        self.acknowledged: dict[str, int] = {}
        self.first: float | None = None  # when the first event since the last one came
        self.timer: asyncio.TimerHandle | None = None
        self.writing: set[asyncio.Future[None]] = set()  # kept until written

    def note(self, stream: Any, offset: Any, at: float) -> None:
        if not isinstance(stream, str) or not isinstance(offset, int):
            return
        self.held[stream] = max(offset, self.held.get(stream, offset))
        self.first = at if self.first is None else self.first
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(ACKNOWLEDGE_EVERY, self.send)

    def send(self) -> None:
        self.timer = None
        moved = {s: o for s, o in self.held.items() if self.acknowledged.get(s) != o}
        if not moved:
            return
        now = time.time()
        waited = min(60_000, int(max(0.0, now - (self.first or now)) * 1000))
        self.acknowledged.update(moved)
        self.first = None
        record = {"type": 1, "target": "Acknowledge", "arguments": [moved, waited]}
        writing = asyncio.ensure_future(self._write(json.dumps(record) + RS))
        self.writing.add(writing)
        writing.add_done_callback(self.writing.discard)

    async def _write(self, text: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(text)


async def listen(
    ws: ClientConnection, client: int, receipts: Receipts, acker: Acker | None = None
) -> None:
    """Stamp every message_received with the time its frame was read (and acknowledge it
    with `acker`). A dropped connection just ends (collect counts it; its missing
    receipts count as lost)."""
    with contextlib.suppress(ConnectionClosed):
        if acker is not None:
            await ws.send(ACKNOWLEDGE_START)
        async for frame in ws:
            at = time.time()
            text = frame if isinstance(frame, str) else frame.decode()
            for record in text.split(RS)[:-1]:
                if '"message_received"' in record:  # not pings or other events
                    event = json.loads(record)["arguments"][0]
                    receipts.add(event["messageId"], client, at)
                    if acker is not None:
                        acker.note(event.get("stream"), event.get("offset"), at)


async def keepalive(ws: ClientConnection) -> None:
    await asyncio.sleep(random.uniform(0, PING_EVERY))  # spread the clients' pings
    with contextlib.suppress(ConnectionClosed):
        while True:
            await ws.send(PING)
            await asyncio.sleep(PING_EVERY)


def reply(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


async def main() -> None:
    stdin = asyncio.StreamReader(limit=2**26)
    protocol = asyncio.StreamReaderProtocol(stdin)
    await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, sys.stdin)
    config = json.loads(await stdin.readline())
    receipts, gate = Receipts(), asyncio.Semaphore(CONNECT_CONCURRENCY)
    opened = await asyncio.gather(
        *(open_client(config["http"], token, gate) for token in config["tokens"]),
        return_exceptions=True,
    )
    sockets = {i: ws for i, ws in enumerate(opened) if isinstance(ws, ClientConnection)}
    acknowledge = bool(config.get("acknowledge"))
    tasks = [
        asyncio.create_task(listen(ws, i, receipts, Acker(ws) if acknowledge else None))
        for i, ws in sockets.items()
    ]
    tasks += [asyncio.create_task(keepalive(ws)) for ws in sockets.values()]
    errors = sorted({repr(e) for e in opened if isinstance(e, BaseException)})
    reply({"ready": len(sockets), "errors": errors[:5]})
    while line := await stdin.readline():
        command = json.loads(line)
        if command["cmd"] == "until":
            target, idle, limit = command["unique"], command["idle"], command["limit"]
            reply({"unique": await receipts.until(target, idle, limit)})
        elif command["cmd"] == "collect":
            closed = sum(ws.close_code is not None for ws in sockets.values())
            reply({"receipts": receipts.collect(), "closed": closed})
    for task in tasks:
        task.cancel()
    await asyncio.gather(*(ws.close() for ws in sockets.values()), return_exceptions=True)


# -- the benchmark's handles ------------------------------------------------------------


class HubClients:
    """One hub-client process (this script), asked one JSON line at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, http: str, tokens: list[str], acknowledge: bool = False) -> "HubClients":
        argv = [sys.executable, str(Path(__file__).resolve())]
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=ROOT, stdin=PIPE, stdout=PIPE, limit=2**28
        )
        clients = cls(proc)
        ready = await clients.ask({"http": http, "tokens": tokens, "acknowledge": acknowledge})
        if ready["ready"] != len(tokens):
            await clients.stop()
            raise RuntimeError(f"only {ready['ready']}/{len(tokens)} clients connected: {ready}")
        return clients

    async def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        await self.proc.stdin.drain()
        if not (line := await self.proc.stdout.readline()):
            raise RuntimeError("a hub-client process exited")
        return dict(json.loads(line))

    async def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()  # end of commands: it closes its sockets and exits
        await stop_process(self.proc, terminate=False)


class Service:
    """A server subprocess whose output is drained all along (a full pipe would stall it)
    into <tmp>/messenger-e2e-<name>.log, for the post-mortem of a bad run."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, ready: str) -> None:
        self.name, self.proc, self.ready = name, proc, re.compile(ready)
        self.tail: deque[str] = deque(maxlen=60)  # shown when it fails to start
        self.log = Path(tempfile.gettempdir()) / f"messenger-e2e-{name}.log"
        self.up = asyncio.Event()
        self.pump = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("w") as log:
            async for raw in self.proc.stdout:
                self.tail.append(line := raw.decode(errors="replace").rstrip())
                log.write(line + "\n")
                if self.ready.search(line):
                    self.up.set()

    @classmethod
    async def start(
        cls, name: str, argv: list[str], env: dict[str, str], ready: str, cwd: Path = ROOT
    ) -> "Service":
        """Start it and wait for its `ready` log line (or its exit, or 90 s)."""
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=cwd, stdout=PIPE, stderr=asyncio.subprocess.STDOUT, limit=2**20
        )
        service = cls(name, proc, ready)
        up = asyncio.create_task(service.up.wait())
        await asyncio.wait({up, service.pump}, timeout=90, return_when=asyncio.FIRST_COMPLETED)
        up.cancel()
        if not service.up.is_set():
            await service.stop()
            raise RuntimeError(f"{name} did not start:\n" + "\n".join(service.tail))
        return service

    async def stop(self) -> None:
        await stop_process(self.proc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.pump, 5)


async def stop_process(proc: asyncio.subprocess.Process, terminate: bool = True) -> None:
    """SIGTERM (the worker releases its lock, Daphne closes its sockets), SIGKILL at 20 s."""
    if terminate and proc.returncode is None:
        proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        proc.kill()
        await proc.wait()


def mint_tokens(users: list[UUID]) -> dict[UUID, str]:
    """Bearer tokens signed with the project's key (the same settings as the servers)."""
    import django

    django.setup()
    from messenger_realtime.conf.settings import load_hub_options
    from messenger_realtime.hub.credentials.tokens import mint_access_token

    options = load_hub_options()
    return {user: mint_access_token(user, options, lifetime=6 * 3600) for user in users}


def overruns(metrics_port: int) -> float:
    """The worker's messenger_realtime_channel_overruns_total (all series) from /metrics."""
    return worker_metric(metrics_port, "messenger_realtime_channel_overruns_total")


def worker_metric(metrics_port: int, name: str) -> float:
    """The sum of a worker family's series named exactly `name` (any labels) from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    lines = (line for line in text.splitlines() if not line.startswith("#"))
    return sum(float(line.split()[-1]) for line in lines if line.split("{")[0].split()[0] == name)


def sibling_url(variable: str, default: str, path: str) -> str:
    """The URL in `variable` (or `default`) with its path (database) replaced by `path`."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(os.environ.get(variable) or default)._replace(path=path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each socket held until all are bound (one at a time,
    the kernel may hand the same port out twice)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


def proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; None once the process is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return data[data.rindex(")") + 2 :].split()


def postgres_pids(postmaster: int, dbname: str) -> list[int]:
    """The postmaster, its auxiliary processes and the backends of `dbname`: backends of
    other databases (other benchmarks, tests) are not this benchmark's cost."""
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        stat = proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is None or int(stat[1]) != postmaster:
            continue
        with contextlib.suppress(OSError):
            title = (entry / "cmdline").read_bytes().decode(errors="replace")
            client_backend = "(" in title or "[local]" in title  # "user db host(port) state"
            if not client_backend or f" {dbname} " in title:
                pids.append(int(entry.name))
    return pids


def host_busy() -> float:
    """CPU seconds the whole machine spent busy (every core, every process) since boot:
    shows how much of the box other work took while a step ran."""
    # user nice system idle iowait irq softirq steal
    ticks = [int(v) for v in Path("/proc/stat").read_text().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK


def cpu_sample(groups: dict[str, list[int]]) -> dict[str, dict[tuple[int, str], float]]:
    """utime+stime seconds per process, keyed by (pid, start time) so a reused pid is new."""
    sample: dict[str, dict[tuple[int, str], float]] = {}
    for name, pids in groups.items():
        sample[name] = {}
        for pid in pids:
            if (stat := proc_stat(pid)) is not None:
                sample[name][(pid, stat[19])] = (int(stat[11]) + int(stat[12])) / TICK
    return sample


if __name__ == "__main__":
    asyncio.run(main())
