"""A reconnect storm (issue 27): one Daphne's clients all come back at once.

    .venv/bin/python bench/storm.py [--clients N] [--procs P] [--steady M] [--rate R]
        [--members K] [--deadline S] [--plot PATH] [--profile PATH] [--recover] [--quick]

Two Daphne processes (A and B) and the worker on one PostgreSQL and one Redis. N
official @microsoft/signalr clients (bench/storm_clients.mjs, P Node processes, the
client's default reconnect policy) connect to A, M more to B; users are in chats of K
members (one chat each). Messages are committed at R per second into A's chats and R
into B's, as the owner's transaction writes them (bench/e2e.py's SEND_SQL), all along.
Then A is killed (SIGKILL: a crash, no goodbye) and started again on the same port at
once. Measured, second by second: how many of A's clients are connected, reconnecting,
or gave up (their policy ran out); the p95 lag (commit -> receipt) of B's clients; the
fraction of a core the restarted A used. Each client resyncs its chat over REST (from
A) after it reconnected, as the web module did, or with `--recover` recovers it over the
hub in one `Recover` (REST only on "resync"), as the web module does now.
After the storm and a quiet spell, every client's timelines are checked against the
database: each message committed into its chat, before or during the storm, must be
there (live, or by the REST resync the client does after reconnecting).

Prints JSON; `--plot` draws connected clients (A) and B's p95 lag against time (PNG);
`--profile` records where the restarted A's CPU goes (py-spy --gil, raw stacks) for
`--profile-seconds`. The Node processes' stderr is kept (their crashes are reported).
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from bench import connections, e2e, hubclients, hubs  # noqa: E402
from messenger_realtime.uuid7 import uuid7  # noqa: E402

DATABASE_URL = os.environ.get("STORM_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_storm"
)
REDIS_URL = os.environ.get("STORM_REDIS_URL") or hubclients.sibling_url(
    "REDIS_URL", "redis://127.0.0.1:6379/0", "/10"
)
NODE_CLIENT = ROOT / "bench" / "storm_clients.mjs"
FD_HEADROOM = 500  # Daphne's own files, and the REST resyncs' connections during the storm


class NodeClients:
    """One bench/storm_clients.mjs process: its ticks, kept as they come."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, stderr: Path) -> None:
        self.name, self.proc, self.stderr = name, proc, stderr
        self.ticks: list[dict[str, Any]] = []
        self.started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.reports: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, name: str, config: dict[str, Any], directory: Path) -> "NodeClients":
        path = directory / f"{name}.json"
        path.write_text(json.dumps(config))
        stderr = directory / f"{name}.err"
        with stderr.open("wb") as errors:
            proc = await asyncio.create_subprocess_exec(
                "node",
                str(NODE_CLIENT),
                str(path),
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=errors,
                limit=2**26,
            )
        return cls(name, proc, stderr)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = json.loads(raw)
            kind = line.pop("type")
            if kind == "tick":
                self.ticks.append(line)
            elif kind == "started":
                self.started.set_result(line)
            elif kind == "report":
                await self.reports.put(line)
        if not self.started.done():
            self.started.set_exception(RuntimeError(f"{self.name} exited: {self.errors()}"))

    def errors(self) -> str:
        """The tail of what the process wrote to stderr."""
        return self.stderr.read_text(errors="replace")[-2000:]

    async def report(self, last_seq: dict[str, int]) -> dict[str, Any]:
        await self.command({"cmd": "report", "lastSeq": last_seq})
        return await asyncio.wait_for(self.reports.get(), 60)

    async def command(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        if self.proc.returncode is not None:
            raise RuntimeError(f"{self.name} exited {self.proc.returncode}: {self.errors()}")
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        await self.proc.stdin.drain()

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.command({"cmd": "stop"})
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self.reader.cancel()


def latest(processes: list[NodeClients], key: str) -> int:
    return sum(p.ticks[-1][key] for p in processes if p.ticks)


def timeline(processes: list[NodeClients], since: float) -> list[dict[str, Any]]:
    """Per whole second since `since`: the processes' states summed (each process's
    latest tick by the end of that second: a busy process may skip one), and the lags
    heard in that second."""
    seconds = sorted({int(t["t"] - since) for p in processes for t in p.ticks})
    rows = []
    for second in seconds:
        end = since + second + 1
        latest = [
            max((t for t in p.ticks if t["t"] < end), key=lambda t: t["t"], default=None)
            for p in processes
        ]
        ticks = [t for t in latest if t is not None]
        heard = (t for p in processes for t in p.ticks if int(t["t"] - since) == second)
        lags = sorted(lag for tick in heard for lag in tick["lags"])
        rows.append(
            {
                "s": second,
                **{
                    key: sum(t[key] for t in ticks)
                    for key in ("connected", "reconnecting", "closed", "failed")
                },
                "events": len(lags),
                "lag_p95_ms": connections.quantile(lags, 0.95) if lags else None,
            }
        )
    return rows


async def send_loop(
    conn: Any, chats: list[e2e.Chat], rate: float, stop: asyncio.Event, sent: list[int]
) -> None:
    """Commit messages into random chats at `rate` per second (Poisson), until `stop`."""
    while not stop.is_set():
        chat = random.choice(chats)
        params = {"chat": chat.id, "message": uuid7(), "sender": random.choice(chat.members)}
        await conn.execute(e2e.SEND_SQL, {**params, "entry": uuid7(), "body": "hello"})
        sent[0] += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), random.expovariate(rate))


async def sample_cpu(pid: int, into: list[tuple[float, float]]) -> None:
    """A process's CPU seconds, sampled each second (bench, not a test)."""
    while True:
        with contextlib.suppress(Exception):
            into.append((time.time(), connections.cpu_of(pid)))
        await asyncio.sleep(1.0)


def cpu_per_second(samples: list[tuple[float, float]], since: float) -> dict[int, float]:
    """Fraction of a core the process used in each whole second since `since`."""
    busy = {}
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        busy[int(t1 - since)] = round((c1 - c0) / (t1 - t0), 2)
    return busy


async def until(check: Any, timeout: float, every: float = 0.5) -> bool:
    """Poll `check()` until true or `timeout` seconds passed (a bench, not a test)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        await asyncio.sleep(every)
    return bool(check())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg
    import redis

    limits = connections.raise_file_limit(args.clients + FD_HEADROOM)
    if limits["soft"] < args.clients + FD_HEADROOM:
        raise SystemExit(f"file limit {limits}: {args.clients} clients do not fit in one Daphne")
    env = {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    layer = redis.Redis.from_url(REDIS_URL)
    layer.flushdb()
    directory = Path(tempfile.mkdtemp(prefix="bench-storm-"))
    result: dict[str, Any] = {
        "clients_a": args.clients,
        "clients_b": args.steady,
        "members_per_chat": args.members,
        "client_processes_a": args.procs,
        "rate_per_hub": args.rate,
        "catch_up": "Recover over the hub" if args.recover else "REST resync",
        "file_limit": limits,
    }
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(layer.flushdb)
        conn = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
        stack.push_async_callback(conn.close)
        chats = (args.clients + args.steady) // args.members
        chat_list = await e2e.seed(conn, chats, args.members, 1)
        storm_chats = chat_list[: args.clients // args.members]
        steady_chats = chat_list[args.clients // args.members :]
        tokens = hubclients.mint_tokens([u for chat in chat_list for u in chat.members])
        port_a, port_b = hubclients.free_port(), hubclients.free_port()
        daphne = {}

        async def start_daphne(name: str, port: int) -> hubclients.Service:
            service = await hubclients.Service.start(
                name, hubs.daphne_argv(port), env, "Listening on TCP address"
            )
            daphne[name] = service
            return service

        await start_daphne("storm-a", port_a)
        await start_daphne("storm-b", port_b)
        stack.push_async_callback(lambda: daphne["storm-a"].stop())
        stack.push_async_callback(lambda: daphne["storm-b"].stop())
        worker = await hubclients.Service.start(
            "storm-worker",
            [sys.executable, "manage.py", "dispatch_realtime"],
            env,
            r"\bdispatching\b",
        )
        stack.push_async_callback(worker.stop)

        def config(port: int, chats: list[e2e.Chat]) -> dict[str, Any]:
            clients = [{"token": tokens[u], "chats": [str(c.id)]} for c in chats for u in c.members]
            return {
                "hub": f"http://127.0.0.1:{port}",
                "concurrency": 25,
                "recover": args.recover,
                "clients": clients,
            }

        procs_a: list[NodeClients] = []
        for i in range(args.procs):
            mine = storm_chats[i :: args.procs]
            procs_a.append(await NodeClients.start(f"a{i}", config(port_a, mine), directory))
            stack.push_async_callback(procs_a[-1].stop)
        proc_b = await NodeClients.start("b", config(port_b, steady_chats), directory)
        stack.push_async_callback(proc_b.stop)
        connect_started = time.time()
        started = await asyncio.gather(*(p.started for p in [*procs_a, proc_b]))
        result["first_connect_s"] = round(time.time() - connect_started, 1)
        result["first_connect"] = started
        if sum(s["connected"] for s in started) != args.clients + args.steady:
            raise RuntimeError(f"not every client connected: {started}")

        stop_sending = asyncio.Event()
        sent_a, sent_b = [0], [0]
        conn_b = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
        stack.push_async_callback(conn_b.close)
        senders = [
            asyncio.create_task(send_loop(conn, storm_chats, args.rate, stop_sending, sent_a)),
            asyncio.create_task(send_loop(conn_b, steady_chats, args.rate, stop_sending, sent_b)),
        ]
        await asyncio.sleep(args.before)  # steady traffic before the crash (a period)

        killed_at = time.time()
        daphne["storm-a"].proc.send_signal(signal.SIGKILL)
        await daphne["storm-a"].proc.wait()
        await start_daphne("storm-a", port_a)
        result["restart_s"] = round(time.time() - killed_at, 2)
        a_cpu: list[tuple[float, float]] = []  # (time, A's CPU seconds so far)
        sampler = asyncio.create_task(sample_cpu(daphne["storm-a"].proc.pid, a_cpu))
        if args.profile:  # where the restarted A's CPU goes during the storm
            profiler = await asyncio.create_subprocess_exec(
                str(Path(sys.executable).parent / "py-spy"),  # the venv's, not on PATH
                "record",
                "--gil",  # what holds the GIL: where the CPU of Python code goes
                "--nonblocking",
                "--format",
                "raw",
                "-r",
                "50",
                "-d",
                str(int(args.profile_seconds)),
                "-o",
                str(args.profile),
                "-p",
                str(daphne["storm-a"].proc.pid),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            stack.push_async_callback(profiler.wait)

        def all_back() -> bool:
            ticks = [p.ticks[-1] for p in procs_a if p.ticks]
            fresh = all(t["t"] > killed_at + 1 for t in ticks)
            return fresh and sum(t["connected"] for t in ticks) == args.clients

        converged = await until(all_back, args.deadline)
        back_at = time.time()
        result["all_back_s"] = round(back_at - killed_at, 1) if converged else None
        await asyncio.sleep(args.after)  # steady traffic after the storm (a period)
        stop_sending.set()
        await asyncio.gather(*senders)
        sampler.cancel()
        # Quiet: until the outbox is drained and the clients' resyncs are done.
        for _ in range(120):
            row = await (
                await conn.execute(
                    "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending'"
                )
            ).fetchone()
            if row and row[0] == 0:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(5)  # the last pushes and resyncs land (a bench, not a test)
        rows = await (await conn.execute("SELECT id, last_seq FROM messenger_chat")).fetchall()
        last_seq = {str(chat): seq for chat, seq in rows}
        reports = await asyncio.gather(*(p.report(last_seq) for p in [*procs_a, proc_b]))
        series = timeline(procs_a, killed_at)
        busy = cpu_per_second(a_cpu, killed_at)
        for row in series:
            row["a_cpu"] = busy.get(row["s"])
        steady = timeline([proc_b], killed_at)
        b_p95 = {r["s"]: r["lag_p95_ms"] for r in steady}
        storm_window = [r for r in steady if 0 <= r["s"] <= (back_at - killed_at)]
        lags_b = [r["lag_p95_ms"] for r in storm_window if r["lag_p95_ms"] is not None]
        result.update(
            {
                "sent_a": sent_a[0],
                "sent_b": sent_b[0],
                "gave_up": sum(r["closed"] for r in reports[:-1]),
                "connected_a_at_end": sum(r["connected"] for r in reports[:-1]),
                "reconnects_a": sum(r["reconnects"] for r in reports[:-1]),
                "resyncs_a": sum(r["resyncs"] for r in reports[:-1]),
                "resync_failures_a": sum(r["resyncFailures"] for r in reports[:-1]),
                "resynced_messages_a": sum(r["resynced"] for r in reports[:-1]),
                "rest_requests_a": sum(r["restRequests"] for r in reports[:-1]),
                "recoveries_a": sum(r["recoveries"] for r in reports[:-1]),
                "recovered_messages_a": sum(r["recovered"] for r in reports[:-1]),
                "missing_a": sum(r["missing"] for r in reports[:-1]),
                "missing_b": reports[-1]["missing"],
                "client_exceptions": sum(r["unhandled"] for r in reports),
                "b_worst_second_p95_ms_during_storm": max(lags_b, default=None),
                "b_seconds_measured_during_storm": len(lags_b),
                "shed_503": shed_count(port_a),
                "timeline": [{**r, "b_p95_ms": b_p95.get(r["s"])} for r in series if r["s"] >= -5],
            }
        )
    if args.plot:
        plot(result, args.plot)
    result["host_load"] = os.getloadavg()[0]
    result["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return result


def shed_count(port: int) -> float | None:
    """The restarted A's messenger_realtime_hub_connects_shed_total (503s since restart)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("messenger_realtime_hub_connects_shed_total "):
            return float(line.split()[-1])
    return 0.0


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["timeline"]
    seconds = [r["s"] for r in rows]
    figure, left = plt.subplots(figsize=(9, 4.5))
    left.plot(seconds, [r["connected"] for r in rows], label="A: connected", color="tab:blue")
    left.plot(
        seconds, [r["reconnecting"] for r in rows], label="A: reconnecting", color="tab:orange"
    )
    left.plot(seconds, [r["closed"] for r in rows], label="A: gave up", color="tab:red")
    left.set_xlabel("seconds since Daphne A was killed (and restarted)")
    left.set_ylabel("A's clients")
    left.axvline(0, color="grey", linewidth=0.8)
    right = left.twinx()
    right.plot(
        seconds,
        [r["b_p95_ms"] for r in rows],
        label="B: p95 lag (ms)",
        color="tab:green",
        linestyle="--",
    )
    right.set_ylabel("B's clients: p95 commit -> receipt (ms)")
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    left.legend(handles=handles, loc="center right")
    left.set_title(
        f"Reconnect storm: {result['clients_a']:,} official JS clients, default retry policy"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10_000, help="clients on Daphne A")
    parser.add_argument("--procs", type=int, default=4, help="Node processes for A's clients")
    parser.add_argument("--steady", type=int, default=200, help="clients on Daphne B")
    parser.add_argument("--members", type=int, default=10, help="members per chat")
    parser.add_argument("--rate", type=float, default=10.0, help="messages/s into each hub's chats")
    parser.add_argument("--before", type=float, default=10.0, help="s of traffic before the kill")
    parser.add_argument("--after", type=float, default=10.0, help="s of traffic after it converged")
    parser.add_argument("--deadline", type=float, default=120.0, help="s to wait for convergence")
    parser.add_argument("--plot", type=Path, help="where to draw the timeline (PNG)")
    parser.add_argument("--profile", type=Path, help="py-spy A after its restart (raw stacks)")
    parser.add_argument("--profile-seconds", type=float, default=40.0, help="for --profile")
    parser.add_argument(
        "--recover", action="store_true", help="clients Recover over the hub, not REST"
    )
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.procs, args.steady, args.before, args.after = 200, 2, 20, 3.0, 3.0
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
