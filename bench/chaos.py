"""The chaos soak (issue 31): traffic for minutes while processes are killed at random,
then proof, from what every client received and what the database committed, that
nothing was lost. Not part of the regular tests (CI runs a one-minute smoke).

    .venv/bin/python bench/chaos.py [--minutes M] [--seed S] [--clients N] [--rate R]
        [--faults K1,K2,...] [--self-test] [--plot PATH] [--markdown PATH]

Topology, all on loopback: a private PostgreSQL cluster and a private redis-server (the
script starts both, so restarting them never touches the machine's own), two Daphne
processes, two `dispatch_realtime` workers (one leads, one stands by; LOCK_TTL 6 s), and
N clients spread over both Daphnes: three quarters raw JSON hub clients
(bench/chaos_clients.py: they see the hub's Close), a quarter official
@microsoft/signalr clients under Node (bench/chaos_clients.mjs; JSON or MessagePack,
with stateful reconnect or not). Every user is in group chats of six and in direct
chats. Owners act through the REST API of either Daphne at R actions per second:
post (most), edit, delete, mark read, remove and add members, start and end calls.

Every Daphne and worker reaches PostgreSQL and Redis through a fault proxy of its own
(bench/chaos_network.py, in its own process), so that the network can fail one process's
connections and not another's.

Faults at random times drawn from the seed (printed; `--seed` replays the schedule and
the traffic's choices). Process faults: kill -9 of the leading worker (restarted),
SIGSTOP of it past the lease's TTL then SIGCONT, kill -9 of a Daphne (restarted on its
port), Redis restarted empty, PostgreSQL crashed and restarted (`pg_ctl restart -m
immediate`), a client that stops reading for 20 s, a burst of 200 messages into one
chat. Network faults (no FIN, no RST unless said): the open connections of one process
to one dependency go silent for good, new ones still work (Redis or PostgreSQL, the
leading worker's or a Daphne's: four kinds); a partition of every process from Redis or
PostgreSQL that heals after 5 to 30 s (what was held is delivered then); 100 ms added each
way on Redis or PostgreSQL for 60 s; a link that flaps for 30 s (down 1 to 4 s, held or
reset in turn, then up 1 to 4 s). Spread evenly with jitter, kinds in turn: 2 in a
minute, 24 in 30 (at least 20 in a 30-minute run, half of them network faults).

After the last fault the traffic stops and the outbox must drain within 30 s with no row
Pending or Quarantined; then the checker (bench/chaos_checker.py) reads every client's
log and the committed outbox (bench/chaos_report.py): lost, foreign, silent, disorder,
duplicates. Prints JSON (the run's table); `--plot` draws delivery latency against time
with the faults marked; `--markdown` writes the run's section of docs/reliability.md.
Exit status 1 when an invariant failed.

`--self-test` runs the same soak (one minute unless told, no faults) with workers whose
push drops one event in a hundred after building it (bench/chaos_dropping_worker.py,
the script's injection, not a product flag): the checker must report those events, by
message, chat and client; it exits 0 only when it did.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from bench import e2e, hubclients, hubs  # noqa: E402
from bench.chaos_report import (  # noqa: E402
    FAULT_KINDS,
    Fault,
    analyse,
    markdown,
    passed,
    plot,
)
from bench.failover_servers import PostgresPair, SentinelRedis  # noqa: E402
from bench.private_postgres import PrivatePostgres  # noqa: E402

LOCK_TTL = 6  # s: a stopped leader is replaced within this (the lease's heartbeat)
DRAIN_LIMIT = 30.0  # s after the last fault's traffic for the outbox to drain
SETTLE_IDLE = 3.0  # s without a new client record: the clients have caught up
BURST = 200
PAUSE = 20.0  # s a slow reader stops reading
GROUP_SIZE = 6
FAULTS_PER_MINUTE = 0.8
PARTITION = (5.0, 30.0)  # s a partition lasts before it heals
LATENCY, LATENCY_FOR = 0.1, 60.0  # s added each way, for how long
FLAPPING_FOR, FLAP = 30.0, (1.0, 4.0)  # s a link flaps; each phase down or up
FROZEN_FOR = 30.0  # s a frozen primary or master stays silent before it is killed
DEPENDENCIES = ("redis", "postgresql")
# --failover: the servers fail over instead of restarting in place, and the processes
# reach Redis through its Sentinels, directly (a Sentinel names the master's own port,
# so no proxy stands between): Redis's network faults are left out of that topology.
# What each engine's failover replaces: its restart in place (and Redis's proxied faults).
REPLACED_BY_FAILOVER = {
    "postgresql": ("postgres_restart",),
    "redis": ("redis_restart", "redis_silent_worker", "redis_silent_hub"),
}


class PrivateRedis:
    """A redis-server of the run's own, without persistence: a restart forgets all."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port)]
        argv += ["--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        wait_port(self.port)

    def crash_restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Network:
    """The fault proxies (bench/chaos_network.py): a port per process and dependency."""

    def __init__(self, proc: subprocess.Popen[str], ports: dict[str, dict[str, int]]) -> None:
        self.proc, self.ports = proc, ports

    @classmethod
    def start(cls, redis_port: int, postgres_ports: list[int], names: list[str]) -> "Network":
        argv = [sys.executable, str(ROOT / "bench" / "chaos_network.py")]
        argv += [str(redis_port), ",".join(map(str, postgres_ports)), *names]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        return cls(proc, json.loads(proc.stdout.readline()))

    def env(self, name: str, postgres: Any, redis: Any) -> dict[str, str]:
        """DATABASE_URL and REDIS_URL of process `name`: through its own proxies (both
        PostgreSQL servers of a pair, in one multi-host URL); Redis through Sentinel
        directly."""
        ports = self.ports[name]
        if isinstance(postgres, PostgresPair):
            database = postgres.url(ports["postgresql"])
        else:
            database = postgres.url.replace(f":{postgres.port}/", f":{ports['postgresql'][0]}/")
        if isinstance(redis, SentinelRedis):
            redis_url = redis.url
        else:
            redis_url = redis.url.replace(f":{redis.port}/", f":{ports['redis'][0]}/")
        return {"DATABASE_URL": database, "REDIS_URL": redis_url}

    def command(self, cmd: str, targets: list[tuple[str, str]], **extra: Any) -> int:
        """Apply `cmd` to the proxies of (process, dependency) `targets`: the flows open."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = json.dumps({"cmd": cmd, "targets": targets, **extra})
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["flows"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_port(port: int, limit: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)  # a server starting: nothing else to wait on
    raise RuntimeError(f"nothing answers on port {port} after {limit} s")


@dataclass
class World:
    """The run's processes and what the traffic knows of the chats."""

    env: dict[str, str]
    postgres: PrivatePostgres | PostgresPair
    redis: PrivateRedis | SentinelRedis
    network: Network
    daphne_ports: list[int]
    worker_argv: list[str]
    daphnes: list[hubclients.Service] = field(default_factory=list)
    workers: list[hubclients.Service] = field(default_factory=list)
    raw_clients: list[asyncio.subprocess.Process] = field(default_factory=list)
    node_clients: list[asyncio.subprocess.Process] = field(default_factory=list)
    raw_ids: list[str] = field(default_factory=list)
    failovers: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # by kind

    @property
    def dependencies(self) -> tuple[str, ...]:
        """What network faults may reach: not Redis behind Sentinels (no proxy there)."""
        return ("postgresql",) if isinstance(self.redis, SentinelRedis) else DEPENDENCIES

    @property
    def database_url(self) -> str:
        """The harness's own way to the database (whichever server is the primary)."""
        if isinstance(self.postgres, PostgresPair):
            return self.postgres.url()
        return self.postgres.url

    def env_of(self, name: str) -> dict[str, str]:
        return {**self.env, **self.network.env(name, self.postgres, self.redis)}

    async def start_daphne(self, i: int) -> None:
        argv, env = hubs.daphne_argv(self.daphne_ports[i]), self.env_of(f"daphne{i}")
        service = await hubclients.Service.start(f"chaos-daphne{i}", argv, env, "Listening on")
        if i < len(self.daphnes):
            self.daphnes[i] = service
        else:
            self.daphnes.append(service)

    async def start_worker(self, i: int) -> None:
        service = await hubclients.Service.start(
            f"chaos-worker{i}",
            self.worker_argv,
            self.env_of(f"worker{i}"),
            r"dispatching|dispatch lock busy",
        )
        if i < len(self.workers):
            self.workers[i] = service
        else:
            self.workers.append(service)

    async def leader(self) -> int:
        """The index of the worker holding the lease (0 when the database cannot say)."""
        import psycopg

        with contextlib.suppress(Exception):
            async with await psycopg.AsyncConnection.connect(
                self.database_url, connect_timeout=3
            ) as conn:
                row = await (
                    await conn.execute("SELECT holder FROM messenger.realtime_dispatch_lease")
                ).fetchone()
                if row:
                    pid = int(str(row[0]).rsplit(":", 1)[1])
                    for i, worker in enumerate(self.workers):
                        if worker.proc.pid == pid:
                            return i
        return 0


# -- seeding --------------------------------------------------------------------------


def seed(users: int, seed_value: int) -> dict[str, Any]:
    """Users, group chats of GROUP_SIZE (each user in two), direct chats (one each)."""
    import django

    django.setup()
    from project.messenger.models import User
    from project.messenger.services import chats as chat_services

    rng = random.Random(seed_value)
    people = [
        User.objects.create(username=f"chaos{i:04d}", display_name=f"Chaos {i}")
        for i in range(users)
    ]
    ids = [p.id for p in people]
    groups, directs = [], []
    for layer in range(2):
        order = ids[:]
        rng.shuffle(order)
        for start in range(0, len(order) - GROUP_SIZE + 1, GROUP_SIZE):
            members = order[start : start + GROUP_SIZE]
            chat = chat_services.create_chat(members[0], members[1:], title=f"group {layer}")
            groups.append({"id": str(chat.id), "members": [str(m) for m in members]})
    for i in range(0, len(ids) - 1, 2):
        chat = chat_services.create_chat(ids[i], [ids[i + 1]])
        directs.append({"id": str(chat.id), "members": [str(ids[i]), str(ids[i + 1])]})
    tokens = hubclients.mint_tokens(ids)
    return {
        "users": [str(u) for u in ids],
        "tokens": {str(u): t for u, t in tokens.items()},
        "groups": groups,
        "directs": directs,
    }


# -- the owners' traffic --------------------------------------------------------------


class Traffic:
    """Owners acting through REST on either Daphne; a refused or failed request is tried
    on the other one (a Daphne may be down), until it answers or 30 s pass."""

    def __init__(self, world: World, people: dict[str, Any], rng: random.Random) -> None:
        self.world, self.people, self.rng = world, people, rng
        self.groups = {
            g["id"]: {"members": set(g["members"]), "out": set()} for g in people["groups"]
        }
        self.directs = people["directs"]
        self.sent: dict[str, list[tuple[str, str]]] = defaultdict(list)  # chat -> (msg, user)
        self.calls: dict[str, tuple[str, str]] = {}  # direct chat -> (call id, caller)
        self.counts: dict[str, int] = defaultdict(int)
        self.accepted: dict[str, float] = {}  # message id -> when its POST was answered
        self.deleted: set[str] = set()
        self.failures: dict[str, int] = defaultdict(int)
        # Requests wait on threads of their own: a Daphne that answers slowly (a silent
        # database flow takes NETWORK_TIMEOUT to notice) must not queue the faults' own
        # work, or the rest of the traffic, behind them on asyncio's default executor.
        self.threads = ThreadPoolExecutor(max_workers=64, thread_name_prefix="traffic")

    def _request(self, method: str, path: str, user: str, data: Any) -> tuple[int, Any]:
        import urllib.error
        import urllib.request

        port = self.rng.choice(self.world.daphne_ports)
        body = None if data is None else json.dumps(data).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.people['tokens'][user]}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            return error.code, None

    async def call(self, name: str, method: str, path: str, user: str, data: Any = None) -> Any:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, answer = await asyncio.get_running_loop().run_in_executor(
                    self.threads, self._request, method, path, user, data
                )
            except Exception:
                status, answer = 0, None  # refused, reset or timed out: a Daphne is down
            if status < 300 and status != 0:
                self.counts[name] += 1
                return answer
            if 400 <= status < 500 and status not in (408, 429):
                self.failures[f"{name} {status}"] += 1  # the domain said no (a race): fine
                return None
            if time.monotonic() > deadline:
                self.failures[f"{name} gave up"] += 1
                return None
            await asyncio.sleep(0.2)

    async def post(self, chat: str, user: str) -> None:
        # clientMessageId: a retry after a lost answer posts the message once
        data = {"body": f"m{self.rng.random():.6f}", "clientMessageId": str(_uuid(self.rng))}
        answer = await self.call("post", "POST", f"/api/chats/{chat}/messages", user, data)
        if answer:
            self.sent[chat].append((answer["messageId"], user))
            self.accepted[answer["messageId"]] = time.time()

    async def act(self) -> None:
        roll = self.rng.random()
        if roll < 0.06 and self.directs:
            await self._call_step(self.rng.choice(self.directs))
            return
        if roll < 0.12:
            await self._membership_step(self.rng.choice(list(self.groups)))
            return
        chat, members = self._pick_chat()
        user = self.rng.choice(members)
        if roll < 0.72 or not self.sent[chat]:
            await self.post(chat, user)
        elif roll < 0.82:
            message, sender = self.rng.choice(self.sent[chat])
            path = f"/api/chats/{chat}/messages/{message}"
            await self.call("edit", "PATCH", path, sender, {"body": "edited"})
        elif roll < 0.88:
            message, sender = self.sent[chat].pop(self.rng.randrange(len(self.sent[chat])))
            self.deleted.add(message)
            await self.call("delete", "DELETE", f"/api/chats/{chat}/messages/{message}", sender)
        else:
            seq = self.rng.randint(1, max(1, len(self.sent[chat])))  # at most last_seq
            await self.call("read", "POST", f"/api/chats/{chat}/read", user, {"seq": seq})

    def _pick_chat(self) -> tuple[str, list[str]]:
        if self.rng.random() < 0.7:
            chat = self.rng.choice(list(self.groups))
            return chat, sorted(self.groups[chat]["members"])
        direct = self.rng.choice(self.directs)
        return direct["id"], direct["members"]

    async def _membership_step(self, chat: str) -> None:
        group = self.groups[chat]
        actor = sorted(group["members"])[0]
        if group["out"] and (self.rng.random() < 0.5 or len(group["members"]) <= 3):
            user = self.rng.choice(sorted(group["out"]))
            if await self.call(
                "add", "POST", f"/api/chats/{chat}/participants", actor, {"userId": user}
            ):
                group["out"].discard(user)
                group["members"].add(user)
        elif len(group["members"]) > 3:
            user = self.rng.choice(sorted(group["members"] - {actor}))
            # Out of the traffic's picture first: nothing is posted as a non-member.
            group["members"].discard(user)
            group["out"].add(user)
            await self.call("remove", "DELETE", f"/api/chats/{chat}/participants/{user}", actor)

    async def _call_step(self, direct: dict[str, Any]) -> None:
        chat = direct["id"]
        if chat in self.calls:
            call, caller = self.calls.pop(chat)
            await self.call("call_end", "POST", f"/api/calls/{call}/end", caller, {})
            return
        caller = self.rng.choice(direct["members"])
        answer = await self.call("call_start", "POST", f"/api/chats/{chat}/calls", caller, {})
        if answer:
            self.calls[chat] = (answer["callId"], caller)

    async def burst(self) -> str:
        chat = self.rng.choice(list(self.groups))
        members = sorted(self.groups[chat]["members"])
        gate = asyncio.Semaphore(10)

        async def one() -> None:
            async with gate:
                await self.post(chat, self.rng.choice(members))

        await asyncio.gather(*(one() for _ in range(BURST)))
        return str(chat)

    async def run(self, rate: float, until: float) -> None:
        """Open loop: an action every 1/rate s on average, each in its own task."""
        tasks: set[asyncio.Task[None]] = set()
        while time.time() < until:
            task = asyncio.create_task(self.act())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(self.rng.expovariate(rate))
        await asyncio.gather(*tasks, return_exceptions=True)
        self.threads.shutdown()


def _uuid(rng: random.Random) -> Any:
    import uuid

    return uuid.UUID(int=rng.getrandbits(128), version=4)


# -- faults ---------------------------------------------------------------------------


def failing_over(failover: str | None) -> tuple[str, ...]:
    """The engines that fail over in this run (--failover postgresql|redis|both)."""
    return ("postgresql", "redis") if failover == "both" else (failover,) if failover else ()


def fault_kinds(failover: str | None) -> tuple[str, ...]:
    """The faults a run may inject: an engine's failover in place of its restart."""
    engines = failing_over(failover)
    left_out = {kind for engine in engines for kind in REPLACED_BY_FAILOVER[engine]}
    # postgres_failover: the primary crashed, the standby promoted, a new standby made;
    # redis_failover: the master killed, the Sentinels' switch, the old one a replica.
    added = {"postgresql": "postgres_failover", "redis": "redis_failover"}
    kinds = [k for k in FAULT_KINDS if k not in left_out]
    return tuple(kinds + [added[engine] for engine in engines])


def schedule(rng: random.Random, minutes: float, kinds: list[str]) -> list[tuple[float, str]]:
    """(seconds after the start, kind): evenly spread with jitter, kinds in turn."""
    count = max(2, round(minutes * FAULTS_PER_MINUTE))
    pool: list[str] = []
    while len(pool) < count:
        batch = list(kinds)
        rng.shuffle(batch)
        pool += batch
    span = minutes * 60 / count
    return [(span * i + rng.uniform(0.2, 0.7) * span, pool[i]) for i in range(count)]


async def inject(kind: str, world: World, traffic: Traffic, rng: random.Random) -> Fault:
    fault = Fault(kind, time.time())
    if kind == "worker_kill":
        i = await world.leader()
        world.workers[i].proc.kill()
        await world.workers[i].proc.wait()
        fault.detail = f"worker{i}"
        await world.start_worker(i)
    elif kind == "worker_stop":
        i = await world.leader()
        pid = world.workers[i].proc.pid
        os.kill(pid, signal.SIGSTOP)
        await asyncio.sleep(LOCK_TTL + 4)  # the standby takes the lease over meanwhile
        os.kill(pid, signal.SIGCONT)
        fault.detail = f"worker{i}"
    elif kind == "daphne_kill":
        i = rng.randrange(len(world.daphnes))
        world.daphnes[i].proc.kill()
        await world.daphnes[i].proc.wait()
        await world.daphnes[i].stop()
        fault.detail = f"daphne{i}"
        await world.start_daphne(i)
    elif kind == "redis_restart":
        assert isinstance(world.redis, PrivateRedis)
        await asyncio.to_thread(world.redis.crash_restart)
    elif kind == "postgres_restart":
        assert isinstance(world.postgres, PrivatePostgres)
        await asyncio.to_thread(world.postgres.crash_restart)
    elif kind in ("postgres_failover", "redis_failover"):
        # Frozen (a host gone silent: its connections open and unanswered, held so for
        # FROZEN_FOR) and crashed (connections reset) in turn, frozen first; the standby
        # promoted or the Sentinels' switch; the old server then made the new one's
        # standby or replica, so the next failover goes back.
        servers = world.postgres if kind == "postgres_failover" else world.redis
        assert isinstance(servers, (PostgresPair, SentinelRedis))
        freeze = world.failovers[kind] % 2 == 0
        world.failovers[kind] += 1
        fault.switched = await asyncio.to_thread(servers.failover, freeze)
        how = "frozen" if freeze else "crashed"
        fault.detail = f"{how}; switched {fault.switched - fault.at:.1f} s after"
        if freeze:
            await asyncio.sleep(FROZEN_FOR)  # silent until fenced
        await asyncio.to_thread(servers.rebuild)
    elif kind == "slow_reader":
        client = rng.choice(world.raw_ids)
        fault.detail = client
        command = {"cmd": "pause", "client": client, "seconds": PAUSE}
        for proc in world.raw_clients:  # the process that has it acts; the others ignore
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(command).encode() + b"\n")
        await asyncio.sleep(PAUSE)
    elif kind == "burst":
        fault.detail = await traffic.burst()
    elif kind.endswith(("_silent_worker", "_silent_hub")):
        dependency = kind.split("_", 1)[0]
        dependency = "postgresql" if dependency == "postgres" else dependency
        if kind.endswith("_worker"):
            name = f"worker{await world.leader()}"
        else:
            name = f"daphne{rng.randrange(len(world.daphnes))}"
        flows = await network(world, "silence", [(name, dependency)])
        fault.detail = f"{name}: {flows} connections"
    elif kind == "partition":
        dependency, seconds = rng.choice(world.dependencies), rng.uniform(*PARTITION)
        targets = everyone(world, dependency)
        fault.detail = f"{dependency}, {seconds:.1f} s"
        await network(world, "partition", targets)
        await asyncio.sleep(seconds)  # the partition's length
        await network(world, "heal", targets)
    elif kind == "latency":
        dependency = rng.choice(world.dependencies)
        targets = everyone(world, dependency)
        fault.detail = f"{dependency}, +{LATENCY * 1000:.0f} ms each way"
        await network(world, "delay", targets, seconds=LATENCY)
        await asyncio.sleep(LATENCY_FOR)  # the slow link's length
        await network(world, "delay", targets, seconds=0.0)
    elif kind == "flapping":
        dependency = rng.choice(world.dependencies)
        targets = everyone(world, dependency)
        ends, downs = time.monotonic() + FLAPPING_FOR, 0
        while time.monotonic() < ends:
            held = downs % 2 == 0  # held, then reset, in turn
            await network(world, "partition" if held else "cut", targets)
            await asyncio.sleep(rng.uniform(*FLAP))  # down
            await network(world, "heal" if held else "restore", targets)
            await asyncio.sleep(rng.uniform(*FLAP))  # up
            downs += 1
        fault.detail = f"{dependency}, down {downs} times"
    fault.ended = time.time()
    return fault


def everyone(world: World, dependency: str) -> list[tuple[str, str]]:
    names = [f"daphne{i}" for i in range(len(world.daphne_ports))]
    return [(n, dependency) for n in names + [f"worker{i}" for i in range(2)]]


async def network(world: World, cmd: str, targets: list[tuple[str, str]], **extra: Any) -> int:
    return await asyncio.to_thread(world.network.command, cmd, targets, **extra)


# -- the run --------------------------------------------------------------------------


async def start_clients(
    world: World, people: dict[str, Any], directory: Path, targets: list[str]
) -> Path:
    """Raw clients in two processes, official ones in one; every record to one file each."""
    specs = []
    for i, user in enumerate(people["users"]):
        port = world.daphne_ports[i % 2]
        spec = {"id": f"c{i:04d}", "user": user, "token": people["tokens"][user]}
        spec["hub"] = f"http://127.0.0.1:{port}"
        if i % 4 == 3:  # a quarter: official clients, each combination in turn
            spec.update(msgpack=(i // 4) % 2 == 1, stateful=(i // 8) % 2 == 1, node=True)
        specs.append(spec)
    raw = [s for s in specs if not s.get("node")]
    node = [s for s in specs if s.get("node")]
    world.raw_ids = [s["id"] for s in raw]
    for n, part in enumerate([raw[0::2], raw[1::2]]):
        path = directory / f"raw{n}.json"
        path.write_text(
            json.dumps(
                {"log": str(directory / f"raw{n}.jsonl"), "targets": targets, "clients": part}
            )
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "bench" / "chaos_clients.py"), str(path),
            cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        world.raw_clients.append(proc)
    path = directory / "node.json"
    path.write_text(
        json.dumps({"log": str(directory / "node.jsonl"), "targets": targets, "clients": node})
    )
    stderr = (directory / "node.err").open("wb")
    proc = await asyncio.create_subprocess_exec(
        "node", str(ROOT / "bench" / "chaos_clients.mjs"), str(path),
        cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
    )  # fmt: skip
    world.node_clients.append(proc)
    return directory


async def ask(proc: asyncio.subprocess.Process, command: dict[str, Any]) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(command).encode() + b"\n")
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    return dict(json.loads(line)) if line else {}


async def census(world: World) -> int:
    """Connected clients, as their processes count them; a client process that died is
    the harness's failure, not the product's: the run stops saying so."""
    answers = []
    for proc in world.raw_clients + world.node_clients:
        if proc.returncode is not None:
            raise RuntimeError(f"a client process exited ({proc.returncode}); see its stderr")
        answers.append(await ask(proc, {"cmd": "census"}))
    return sum(a.get("connected", 0) for a in answers)


async def wait_connected(world: World, total: int, limit: float) -> int:
    deadline = time.monotonic() + limit
    while (up := await census(world)) < total and time.monotonic() < deadline:
        await asyncio.sleep(0.5)  # polling the client processes' own count
    return up


async def settle(directory: Path, limit: float) -> None:
    """Until no client wrote a record for SETTLE_IDLE s (or `limit`)."""
    deadline, last, quiet_since = time.monotonic() + limit, -1, time.monotonic()
    while time.monotonic() < deadline:
        size = sum(p.stat().st_size for p in directory.glob("*.jsonl"))
        if size != last:
            last, quiet_since = size, time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLE_IDLE:
            return
        await asyncio.sleep(0.5)  # watching files grow


# Which of the messages the owners were told were committed are in the database now.
PRESENT = "SELECT id::text FROM messenger_message WHERE id = ANY(%s::uuid[])"


async def lost_with_a_primary(url: str, traffic: "Traffic") -> dict[str, Any]:
    """Messages whose POST was answered 201 and that the database no longer has: with
    asynchronous replication, what the crashed primary committed and had not yet sent
    to the standby (the recovery point objective). Nothing else may be missing."""
    import psycopg

    wanted = sorted(set(traffic.accepted) - traffic.deleted)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        rows = await (await conn.execute(PRESENT, (wanted,))).fetchall()
    missing = sorted(set(wanted) - {row[0] for row in rows})
    return {
        "messages": len(missing),
        "acknowledged_at": [round(traffic.accepted[m], 3) for m in missing[:20]],
    }


OUTBOX_LEFT = """
SELECT count(*) FILTER (WHERE status = 'Pending'), count(*) FILTER (WHERE status = 'Quarantined')
FROM messenger.realtime_outbox
"""


async def drain(url: str, limit: float) -> tuple[float | None, int, int]:
    """Seconds until no row is Pending (None: not within `limit`), Pending, Quarantined."""
    import psycopg

    started = time.monotonic()
    pending = quarantined = -1
    while time.monotonic() - started < limit:
        with contextlib.suppress(psycopg.OperationalError):
            async with await psycopg.AsyncConnection.connect(url, connect_timeout=3) as conn:
                pending, quarantined = await (await conn.execute(OUTBOX_LEFT)).fetchone()  # type: ignore[misc]
                if pending == 0:
                    return time.monotonic() - started, pending, quarantined
        await asyncio.sleep(0.5)  # polling the outbox
    return None, pending, quarantined


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    directory = Path(tempfile.mkdtemp(prefix="chaos-"))
    directory.chmod(0o755)  # the postgres user runs the private cluster below it
    server_settings = {"max_connections": "200", "fsync": "off"}
    postgres: PrivatePostgres | PostgresPair
    redis: PrivateRedis | SentinelRedis
    engines = failing_over(args.failover)
    if "postgresql" in engines:  # a primary and its streaming standby
        postgres = PostgresPair(directory, server_settings, not args.async_replication)
        postgres_ports = [node.port for node in postgres.nodes]
    else:
        postgres = PrivatePostgres(directory / "pg", hubclients.free_port(), server_settings)
        postgres_ports = [postgres.port]
    if "redis" in engines:  # a master, its replica and three Sentinels
        redis = SentinelRedis(directory / "redis")
    else:
        redis = PrivateRedis(hubclients.free_port())
    world_url = postgres.url() if isinstance(postgres, PostgresPair) else postgres.url
    env = {**os.environ, "DATABASE_URL": world_url, "REDIS_URL": redis.url}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        PYTHONUNBUFFERED="1",
        MESSENGER_REALTIME_LOCK_TTL=str(LOCK_TTL),
        MESSENGER_REALTIME_METRICS_PORT="0",
        # Through Sentinel the per-user bounds (rate limits, places, typing, presence)
        # follow the failover too; on the restarting server they are left out.
        MESSENGER_REALTIME_RATE_LIMIT_REDIS_URL=redis.url if "redis" in engines else "",
    )
    worker = [sys.executable, "manage.py", "dispatch_realtime"]
    if args.self_test:
        worker = [sys.executable, str(ROOT / "bench" / "chaos_dropping_worker.py")]
    daphne_ports = [hubclients.free_port(), hubclients.free_port()]
    names = ["daphne0", "daphne1", "worker0", "worker1"]
    result: dict[str, Any] = {
        "failover": list(engines),
        "replication": "asynchronous" if args.async_replication else "synchronous",
        "seed": args.seed,
        "minutes": args.minutes,
        "self_test": args.self_test,
    }
    async with contextlib.AsyncExitStack() as stack:
        redis_port = redis.ports[0] if isinstance(redis, SentinelRedis) else redis.port
        network = Network.start(redis_port, postgres_ports, names)  # connects on demand
        stack.callback(network.stop)
        world = World(env, postgres, redis, network, daphne_ports, worker)
        stack.callback(postgres.stop)  # before the start: a half-started pair is stopped
        postgres.start()
        stack.callback(redis.stop)
        redis.start()
        os.environ.update(DATABASE_URL=world_url, REDIS_URL=redis.url)
        await e2e.check_call(sys.executable, "scripts/ensure_database.py", env=env)
        await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
        people = await asyncio.to_thread(seed, args.clients, args.seed)

        async def stop_all() -> None:
            for proc in world.raw_clients + world.node_clients:
                if proc.returncode is None:
                    with contextlib.suppress(Exception):
                        await ask(proc, {"cmd": "flush"})
                    assert proc.stdin is not None
                    with contextlib.suppress(Exception):
                        proc.stdin.write(b'{"cmd": "stop"}\n')
                    await hubclients.stop_process(proc, terminate=False)
            for service in world.daphnes + world.workers:
                os.kill(
                    service.proc.pid, signal.SIGCONT
                ) if service.proc.returncode is None else None
                await service.stop()

        stack.push_async_callback(stop_all)  # before any start: a failed one stops the rest
        for i in range(2):
            await world.start_daphne(i)
        for i in range(2):
            await world.start_worker(i)
        from messenger_realtime.outbox.enums import RealtimeDispatchKind, event_name

        targets = [event_name(k) for k in RealtimeDispatchKind.values]
        await start_clients(world, people, directory, targets)
        connected = await wait_connected(world, args.clients, 120)
        result["clients"] = {"total": args.clients, "connected_at_start": connected}

        traffic = Traffic(world, people, rng)
        plan = [] if args.self_test else schedule(rng, args.minutes, args.faults)
        started = time.time()
        until = started + args.minutes * 60
        load = asyncio.create_task(traffic.run(args.rate, until))
        faults: list[Fault] = []
        for offset, kind in plan:
            await asyncio.sleep(max(0.0, started + offset - time.time()))  # the schedule
            print(f"[chaos] {time.time() - started:7.1f} s: {kind}", file=sys.stderr)
            faults.append(await inject(kind, world, traffic, rng))
        await load
        drained, pending, quarantined = await drain(world_url, DRAIN_LIMIT)
        await wait_connected(world, args.clients, 30)
        await settle(directory, 30)
        await stop_all()
        result.update(traffic={**traffic.counts}, refused={**traffic.failures})
        seconds = None if drained is None else round(drained, 2)
        result["drain"] = {"seconds": seconds, "pending": pending, "quarantined": quarantined}
        result.update(await analyse(world_url, people, directory, faults, started))
        result["acknowledged_then_lost"] = await lost_with_a_primary(world_url, traffic)
        result["faults"] = [vars(f) | {"at": round(f.at - started, 1)} for f in faults]
        if args.plot:
            plot(directory, faults, started, args.plot)
    if args.keep:
        print(
            f"[chaos] the clients' logs and the servers' are kept in {directory}", file=sys.stderr
        )
    else:
        shutil.rmtree(directory, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--clients", type=int, default=240)
    parser.add_argument("--rate", type=float, default=10.0, help="owner actions per second")
    parser.add_argument("--faults", type=lambda s: s.split(","), default=None)
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument(
        "--failover",
        nargs="?",
        const="both",
        choices=("postgresql", "redis", "both"),
        help="a PostgreSQL standby and/or Redis Sentinels; their failovers among the faults",
    )
    parser.add_argument(
        "--async-replication",
        action="store_true",
        help="the standby replicates asynchronously: a failover loses what it had not got "
        "(acknowledged_then_lost), and the checker's counts include what follows from it",
    )
    parser.add_argument("--plot")
    parser.add_argument("--markdown")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = parser.parse_args()
    if args.minutes is None:
        args.minutes = 1.0 if args.self_test else 30.0
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    kinds = fault_kinds(args.failover)
    for kind in args.faults or ():
        if kind not in kinds:
            parser.error(f"--faults: unknown kind {kind!r} (one of {', '.join(kinds)})")
    args.faults = args.faults or list(kinds)
    print(f"[chaos] seed {args.seed}", file=sys.stderr)
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2, default=str))
    if args.markdown:
        Path(args.markdown).write_text(markdown(result) + "\n")
    if args.self_test:
        caught = result["lost"] + result["silent"]
        print(f"[chaos] self-test: the checker reported {caught} violations", file=sys.stderr)
        sys.exit(0 if caught else 1)
    sys.exit(0 if passed(result) else 1)


if __name__ == "__main__":
    main()
