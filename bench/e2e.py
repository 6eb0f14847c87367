"""Open-loop end-to-end benchmark: owners commit messages at fixed Poisson rates while hub
clients (bench/hubclients.py) are connected through a real Daphne and a real
`dispatch_realtime` worker pushes through channels-redis.

    .venv/bin/python bench/e2e.py --rates 250,1000,2000 --duration 10 [--hubs N]

`--hubs N` serves the hub from N Daphne processes behind Debian's nginx, configured as
`scripts/serve --hubs N` does (bench/hubs.py); nginx's CPU is reported apart.

Lag = client receipt - planned send time (no coordinated omission) in an HDR histogram per
rate, plus lost / duplicated deliveries, channel-layer overruns, the idle wake and CPU
seconds per 1,000 messages of each process. `--acknowledge`: the clients acknowledge what
they receive as the web client module does, and each step also reads what Daphne
measured of them (messenger_realtime_hub_client_delivery_seconds, commit -> client) beside
the clients' own figures from the commit's return (`hub_measured`). Own database and Redis
db (E2E_DATABASE_URL, E2E_REDIS_URL), so it runs beside the other benchmarks.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import redis
from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from bench import hubclients, hubs  # noqa: E402
from messenger_realtime.uuid7 import uuid7  # noqa: E402

# Beside whatever DATABASE_URL / REDIS_URL point at (a private server in CI, say).
DATABASE_URL = os.environ.get("E2E_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_e2e"
)
REDIS_URL = os.environ.get("E2E_REDIS_URL") or hubclients.sibling_url(
    "REDIS_URL", "redis://127.0.0.1:6379/0", "/7"
)
DRAIN_IDLE = 10.0  # s without a new receipt before the rest counts as lost
DRAIN_LIMIT = 300.0  # and at most this long after the last send (bounds a saturated run)
PRODUCERS = 8  # owner connections: 4,000 commits/s at ~2 ms each; PostgreSQL is shared

# What post_message() writes, as one autocommit statement (one transaction): bump the
# chat's last_seq under its row lock, take the chat stream's next offset under its
# counter's row lock (outbox/streams.py), insert the message with that seq, insert the
# outbox row with the columns enqueue() writes, and NOTIFY realtime_outbox (at commit).
SEND_SQL = """
WITH c AS (UPDATE messenger_chat SET last_seq = last_seq + 1 WHERE id = %(chat)s
           RETURNING id, last_seq),
s AS (INSERT INTO messenger.realtime_stream AS s (stream, last_offset)
      SELECT 'chat:' || id, 1 FROM c
      ON CONFLICT (stream) DO UPDATE SET last_offset = s.last_offset + 1
      RETURNING last_offset),
m AS (INSERT INTO messenger_message (id, chat_id, seq, sender_id, kind, body, card_text, sent_at)
      SELECT %(message)s, id, last_seq, %(sender)s, 'Text', %(body)s, '', now() FROM c
      RETURNING chat_id, seq),
o AS (INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, message_id, seq,
        status, attempts, next_attempt_at, created_at, updated_at, row_version, stream_offset)
      SELECT %(entry)s, 'MessageReceived', 'ChatGroup', chat_id, %(message)s, seq, 'Pending',
        0, now(), now(), now(), 0, (SELECT last_offset FROM s) FROM m RETURNING 1)
SELECT pg_notify('realtime_outbox', '') FROM o
"""

VACUUM_SQL = "VACUUM ANALYZE messenger.realtime_outbox, messenger_message, messenger_chat"

SEED_SQL = [
    "TRUNCATE messenger.realtime_outbox",
    "TRUNCATE messenger_chat, messenger_user CASCADE",
    "INSERT INTO messenger_user (id, password, is_superuser, username, first_name, last_name,"
    " email, is_staff, is_active, date_joined, display_name) SELECT gen_random_uuid(), '!',"
    " false, 'e2e' || lpad(g::text, 6, '0'), '', '', '', false, true, now(), ''"
    " FROM generate_series(0, %(users)s - 1) g",
    "INSERT INTO messenger_chat (id, kind, title, last_seq, created_at, updated_at)"
    " SELECT gen_random_uuid(), 'Group', 'e2e ' || lpad(g::text, 6, '0'), 0, now(), now()"
    " FROM generate_series(0, %(chats)s - 1) g",
    # Users k*m .. k*m+m-1 (in username order) join chat k (in title order).
    "INSERT INTO messenger_participant (id, chat_id, user_id, is_active, last_read_seq, joined_at)"
    " SELECT gen_random_uuid(), c.id, u.id, true, 0, now()"
    " FROM (SELECT id, row_number() OVER (ORDER BY title) - 1 AS k FROM messenger_chat) c"
    " JOIN (SELECT id, row_number() OVER (ORDER BY username) - 1 AS k FROM messenger_user) u"
    "   ON u.k / %(members)s = c.k",
    "ANALYZE",
]


@dataclass
class Chat:
    id: UUID
    members: list[UUID]
    process: int  # the hub-client process holding its members' connections


@dataclass(slots=True)
class Send:
    chat: int
    planned: float
    message_id: str = ""
    committed: float = 0.0


def poisson_plan(rate: float, duration: float, chats: int, start: float) -> list[Send]:
    """Planned send times: exponential gaps, i.e. a Poisson process at `rate`."""
    plan, t = [], start
    while (t := t + random.expovariate(rate)) < start + duration:
        plan.append(Send(random.randrange(chats), t))
    return plan


def bucket_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over cumulative buckets: linear within the bucket
    the rank falls in (the +Inf bucket answers its lower bound)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if bound == float("inf"):
                return lower
            inside = buckets[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, buckets[bound]
    return lower


def hub_measured(buckets: dict[float, float]) -> dict[str, float]:
    """What Daphne measured of a step's acknowledged deliveries (commit -> client)."""
    count = buckets.get(float("inf"), 0.0)
    if not count:
        return {"deliveries": 0}
    return {
        "deliveries": count,
        "p50_ms": round(bucket_quantile(0.5, buckets) * 1000, 1),
        "p95_ms": round(bucket_quantile(0.95, buckets) * 1000, 1),
    }


def micros(seconds: float) -> int:
    return min(max(int(seconds * 1e6), 1), 60_000_000)


def histogram() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)  # 1 us .. 60 s, 3 significant digits


def percentiles(h: HdrHistogram, prefix: str = "") -> dict[str, float]:
    points = {f"{prefix}p{p}_ms": h.get_value_at_percentile(p) / 1000 for p in (50, 95, 99)}
    return {**points, f"{prefix}max_ms": h.get_max_value() / 1000}


@dataclass
class Bench:
    conns: list[psycopg.AsyncConnection[Any]]
    chats: list[Chat]
    clients: list[hubclients.HubClients]
    pids: dict[str, list[int]]  # worker, daphne, redis, clients, producer
    postmaster: int
    metrics_port: int
    daphne_urls: list[str]  # each Daphne's own, for its /metrics
    acknowledge: bool = False  # the clients acknowledge: read what Daphne measured

    def delivery_buckets(self) -> dict[float, float]:
        """Every Daphne's messenger_realtime_hub_client_delivery_seconds buckets of
        message_received, summed: upper bound -> cumulative count ({} unless the clients
        acknowledge)."""
        buckets: dict[float, float] = {}
        if not self.acknowledge:
            return buckets
        for url in self.daphne_urls:
            text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
            for family in text_string_to_metric_families(text):
                if family.name != "messenger_realtime_hub_client_delivery_seconds":
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_bucket") and (
                        sample.labels.get("kind") == "message_received"
                    ):
                        bound = float(sample.labels["le"])
                        buckets[bound] = buckets.get(bound, 0.0) + sample.value
        return buckets

    def sample(self) -> tuple[float, float, dict[str, dict[tuple[int, str], float]], float]:
        dbname = str(conninfo_to_dict(DATABASE_URL)["dbname"])
        groups = {**self.pids, "postgres": hubclients.postgres_pids(self.postmaster, dbname)}
        cpu = hubclients.cpu_sample(groups)
        return time.time(), hubclients.host_busy(), cpu, hubclients.overruns(self.metrics_port)

    def claims(self) -> float:
        """Claim statements the worker ran so far (one or more per pass)."""
        name = "messenger_realtime_claim_duration_seconds_count"
        return hubclients.worker_metric(self.metrics_port, name)

    async def produce(self, plan: list[Send]) -> None:
        """Open loop: each owner takes the next planned send, waits for its time (never for
        a delivery) and commits; a late send still counts from its planned time."""
        queue = iter(plan)

        async def owner(conn: psycopg.AsyncConnection[Any]) -> None:
            for send in queue:
                if (delay := send.planned - time.time()) > 0:
                    await asyncio.sleep(delay)
                chat = self.chats[send.chat]
                message_id = uuid7()  # made at send time, as Message.objects.create does
                send.message_id = str(message_id)
                params = {"chat": chat.id, "sender": chat.members[0], "message": message_id}
                await conn.execute(SEND_SQL, {**params, "entry": uuid7(), "body": "hello"})
                send.committed = time.time()

        await asyncio.gather(*(owner(conn) for conn in self.conns))

    async def ask_all(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return await asyncio.gather(
            *(c.ask(m) for c, m in zip(self.clients, commands, strict=True))
        )

    async def collect(self) -> tuple[list[tuple[str, tuple[int, int], float]], int]:
        """Receipts since the last collect, the client as (process, index); closed sockets."""
        answers = await self.ask_all([{"cmd": "collect"}] * len(self.clients))
        receipts = [(m, (i, c), t) for i, a in enumerate(answers) for m, c, t in a["receipts"]]
        return receipts, sum(a["closed"] for a in answers)

    async def step(self, rate: float, duration: float) -> dict[str, Any]:
        # Each step starts from clean tables, as autovacuum would keep them, not from the
        # previous step's dead rows (the claim walks the outbox index through them).
        await self.conns[0].execute(VACUUM_SQL)
        began, host_before, cpu_before, overruns_before = self.sample()
        claims_before = self.claims()
        measured_before = self.delivery_buckets()
        start = time.time() + 0.2
        plan = poisson_plan(rate, duration, len(self.chats), start)
        await self.produce(plan)
        # Drain: until every expected receipt is in, or DRAIN_IDLE s pass without one.
        expected = [0] * len(self.clients)
        for send in plan:
            expected[self.chats[send.chat].process] += len(self.chats[send.chat].members)
        drain = {"cmd": "until", "idle": DRAIN_IDLE, "limit": DRAIN_LIMIT}
        await self.ask_all([{**drain, "unique": n} for n in expected])
        ended, host_after, cpu_after, overruns_after = self.sample()
        claims = self.claims() - claims_before
        if self.acknowledge:  # the last acknowledgements' interval (not synchronisation)
            await asyncio.sleep(hubclients.ACKNOWLEDGE_EVERY + 0.5)
        measured = {
            bound: count - measured_before.get(bound, 0.0)
            for bound, count in self.delivery_buckets().items()
        }
        sends = {s.message_id: s for s in plan}
        lag, fresh, commit = histogram(), histogram(), histogram()
        seen: set[tuple[str, tuple[int, int]]] = set()
        duplicated = 0
        receipts, closed = await self.collect()
        for message_id, client, at in receipts:
            if (sent := sends.get(message_id)) is None:
                continue  # a straggler of an earlier step
            if (message_id, client) in seen:
                duplicated += 1
                continue
            seen.add((message_id, client))
            lag.record_value(micros(at - sent.planned))
            fresh.record_value(micros(at - sent.committed))
        for send in plan:
            commit.record_value(micros(send.committed - send.planned))
        used = {
            name: sum(v - cpu_before[name].get(k, 0.0) for k, v in after.items())
            for name, after in cpu_after.items()
        }
        n = max(len(plan), 1)
        return {
            "offered_rate": rate,
            "achieved_rate": n / (max(s.committed for s in plan) - start) if plan else 0.0,
            "messages": len(plan),
            "deliveries": len(seen) + duplicated,
            "lost": sum(expected) - len(seen),
            "duplicated": duplicated,
            "overruns": overruns_after - overruns_before,
            "clients_closed": closed,  # connections lost so far (the hub dropped them)
            **percentiles(lag),
            "commit_p95_ms": commit.get_value_at_percentile(95) / 1000,
            **percentiles(fresh, "from_commit_"),
            **({"hub_measured": hub_measured(measured)} if measured else {}),
            "cpu_s_per_1000": {k: round(v / n * 1000, 3) for k, v in used.items()},
            # Claims (fair batches and suspect probes) per 1,000 messages: how many passes
            # the wake-ups cost, a figure the box's noise does not move much.
            "claims_per_1000": round(claims / n * 1000, 1),
            # Cores busy over the step (produce + drain); near 1.0 a process is saturated
            # ("clients" sums the client processes). The host figure includes others' work.
            "cpu_cores_busy": {k: round(v / (ended - began), 2) for k, v in used.items()},
            "host_cores_busy": round((host_after - host_before) / (ended - began), 2),
        }

    async def idle_wake(self, samples: int, idle: float = 1.0) -> float | None:
        """Median ms from a single commit (the system idle before it) to its first receipt."""
        waits = []
        for _ in range(samples):
            await asyncio.sleep(idle)  # pacing: let the worker settle into its LISTEN wait
            send = Send(random.randrange(len(self.chats)), time.time())
            await self.produce([send])
            chat = self.chats[send.chat]
            until = {"cmd": "until", "unique": len(chat.members), "idle": 10, "limit": 10}
            await self.clients[chat.process].ask(until)
            times = [t for m, _, t in (await self.collect())[0] if m == send.message_id]
            if times:
                waits.append((min(times) - send.committed) * 1000)
        return statistics.median(waits) if waits else None


async def check_call(*argv: str, env: dict[str, str]) -> None:
    proc = await asyncio.create_subprocess_exec(*argv, env=env, cwd=ROOT)
    if await proc.wait() != 0:
        raise RuntimeError(f"{' '.join(argv)} failed")


async def seed(
    conn: psycopg.AsyncConnection[Any], chats: int, members: int, procs: int
) -> list[Chat]:
    for statement in SEED_SQL:
        await conn.execute(
            statement, {"users": chats * members, "chats": chats, "members": members}
        )
    rows = await (
        await conn.execute(
            "SELECT c.id, array_agg(p.user_id ORDER BY u.username) FROM messenger_chat c"
            " JOIN messenger_participant p ON p.chat_id = c.id"
            " JOIN messenger_user u ON u.id = p.user_id GROUP BY c.id, c.title ORDER BY c.title"
        )
    ).fetchall()
    return [Chat(chat_id, list(users), k % procs) for k, (chat_id, users) in enumerate(rows)]


async def run(
    rates: list[int],
    duration: float,
    clients: int,
    chats: int,
    idle_samples: int,
    procs: int,
    hub_count: int = 1,
    acknowledge: bool = False,
) -> dict[str, Any]:
    if clients < chats or clients % chats:
        raise ValueError("clients must be a multiple of chats (members per chat)")
    members = clients // chats
    with contextlib.suppress(RuntimeError, ValueError):  # only in the main thread
        # A SIGTERM unwinds like Ctrl-C: the exit stack stops every subprocess.
        task = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # type: ignore[union-attr]
    env = {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    layer = redis.Redis.from_url(REDIS_URL)
    layer.flushdb()  # our own db number: stale groups of an earlier run would get pushes
    redis_pid = int(layer.info("server")["process_id"])  # type: ignore[index]
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(layer.flushdb)  # runs last: no groups or queues left behind
        conns = []
        for _ in range(PRODUCERS):
            conns.append(await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True))
            stack.push_async_callback(conns[-1].close)
        chat_list = await seed(conns[0], chats, members, procs)
        tokens = hubclients.mint_tokens([u for chat in chat_list for u in chat.members])
        row = await (await conns[0].execute("SELECT pg_backend_pid()")).fetchone()
        stat = hubclients.proc_stat(row[0] if row else 0)
        postmaster = int(stat[1]) if stat else 0  # our backend's parent (PostgreSQL is local)
        metrics_port = hubclients.free_port()
        port, daphne_pids, nginx_pids = await hubs.start(hub_count, env, stack)
        worker_env = dict(env, MESSENGER_REALTIME_METRICS_PORT=str(metrics_port))
        worker_argv = [sys.executable, "manage.py", "dispatch_realtime"]
        worker = await hubclients.Service.start(
            "worker", worker_argv, worker_env, r"\bdispatching\b"
        )
        stack.push_async_callback(worker.stop)
        hub_clients: list[hubclients.HubClients] = []
        for i in range(procs):
            mine = [tokens[u] for c in chat_list if c.process == i for u in c.members]
            hub_clients.append(
                await hubclients.HubClients.start(f"http://127.0.0.1:{port}", mine, acknowledge)
            )
            stack.push_async_callback(hub_clients[-1].stop)
        pids = {
            "worker": [worker.proc.pid],
            "daphne": daphne_pids,
            **({"nginx": nginx_pids} if nginx_pids else {}),
            "redis": [redis_pid],
            "clients": [c.proc.pid for c in hub_clients],
            "producer": [os.getpid()],
        }
        daphne_ports = [port] if hub_count == 1 else [port + i for i in range(1, hub_count + 1)]
        daphne_urls = [f"http://127.0.0.1:{p}" for p in daphne_ports]
        bench = Bench(
            conns, chat_list, hub_clients, pids, postmaster, metrics_port, daphne_urls, acknowledge
        )
        await bench.step(min(rates), 1.0)  # warm-up: connections, prepared statements, caches
        steps = [await bench.step(rate, duration) for rate in rates]
        idle = await bench.idle_wake(idle_samples)
    return {
        "steps": steps,
        "idle_wake_median_ms": idle,
        "clients": len(chat_list) * members,
        "chats": len(chat_list),
        "client_processes": procs,
        "hubs": hub_count,
        "duration_s": duration,
    }


def run_e2e(
    rates: list[int],
    duration: float,
    *,
    clients: int = 500,
    chats: int = 250,
    idle_samples: int = 30,
    client_processes: int = 2,
    hub_count: int = 1,
    acknowledge: bool = False,
) -> dict[str, Any]:
    """Run every rate step (after a 1 s warm-up), then the idle wake; JSON-able results."""
    return asyncio.run(
        run(rates, duration, clients, chats, idle_samples, client_processes, hub_count, acknowledge)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="250,500,1000,2000,4000", help="msg/s, comma-separated")
    parser.add_argument("--duration", type=float, help="s per rate (default 20, --quick 3)")
    parser.add_argument("--quick", action="store_true", help="3 s steps, 5 idle samples")
    parser.add_argument("--idle-samples", type=int, help="default 30, --quick 5")
    options = (("--clients", 500), ("--chats", 250), ("--client-processes", 2), ("--hubs", 1))
    for option, default in options:
        parser.add_argument(option, type=int, default=default)
    parser.add_argument(
        "--acknowledge", action="store_true", help="clients acknowledge; Daphne's figure too"
    )
    args = parser.parse_args()
    try:
        results = run_e2e(
            [int(rate) for rate in args.rates.split(",")],
            args.duration or (3.0 if args.quick else 20.0),
            clients=args.clients,
            chats=args.chats,
            idle_samples=(5 if args.quick else 30)
            if args.idle_samples is None
            else args.idle_samples,
            client_processes=args.client_processes,
            hub_count=args.hubs,
            acknowledge=args.acknowledge,
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        sys.exit("interrupted; servers and clients stopped")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
