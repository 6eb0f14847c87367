"""The worker's own cost at a moderate rate (issue 15, item 2): CPU seconds and claims per
1,000 messages, and the persist -> push lag, with nothing but owners, PostgreSQL, Redis and
one real `dispatch_realtime` (no Daphne, no hub clients: its pushes go to layer groups
nobody is in). So the worker is measured apart from the hub's load, which on this two-core
box starves it and hides the per-wake cost behind the batching a starved worker does.

    .venv/bin/python bench/worker_wakes.py --rate 500 --duration 20 [--repeats 3]

Prints JSON. Owners commit on a Poisson schedule with bench/e2e.py's SEND_SQL (one
transaction per message, one NOTIFY each); each step drains until nothing is Pending.
The lag is the worker's own `messenger_realtime_lag_seconds` (Done time minus created_at,
database clock): its mean over the step, and the median over single commits made after a
second of quiet (the idle wake, one sample each). Set MESSENGER_REALTIME_WAKE_COALESCE to
compare windows. Own database and Redis db (E2E_DATABASE_URL, E2E_REDIS_URL), as e2e.py.
"""

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import e2e, hubclients
from messenger_realtime.uuid7 import uuid7

LAG = "messenger_realtime_lag_seconds"
CLAIMS = "messenger_realtime_claim_duration_seconds_count"  # fair claims and suspect probes


class WorkerBench:
    def __init__(self, conns: list[psycopg.AsyncConnection[Any]], chats: list[e2e.Chat]) -> None:
        self.conns, self.chats = conns, chats
        self.metrics_port = 0
        self.pid = 0

    def metric(self, name: str) -> float:
        return hubclients.worker_metric(self.metrics_port, name)

    async def pending(self) -> int:
        cur = await self.conns[0].execute(
            "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending'"
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def commit(self, send: e2e.Send, conn: psycopg.AsyncConnection[Any]) -> None:
        chat = self.chats[send.chat]
        params = {"chat": chat.id, "sender": chat.members[0], "message": uuid7()}
        await conn.execute(e2e.SEND_SQL, {**params, "entry": uuid7(), "body": "hello"})

    async def step(self, rate: float, duration: float) -> dict[str, Any]:
        await self.conns[0].execute(e2e.VACUUM_SQL)
        # The /metrics scrapes (the worker renders them) stay outside the CPU window.
        claims_before, lag_before = self.metric(CLAIMS), self.lag()
        cpu_before = hubclients.cpu_sample({"worker": [self.pid]})["worker"]
        plan = e2e.poisson_plan(rate, duration, len(self.chats), time.time() + 0.2)
        queue = iter(plan)

        async def owner(conn: psycopg.AsyncConnection[Any]) -> None:
            for send in queue:
                if (delay := send.planned - time.time()) > 0:
                    await asyncio.sleep(delay)
                await self.commit(send, conn)

        await asyncio.gather(*(owner(conn) for conn in self.conns))
        achieved = len(plan) / max(time.time() - plan[0].planned, 1e-9) if plan else 0.0
        while await self.pending():
            await asyncio.sleep(0.05)
        cpu_after = hubclients.cpu_sample({"worker": [self.pid]})["worker"]
        used = sum(v - cpu_before.get(k, 0.0) for k, v in cpu_after.items())
        claims = self.metric(CLAIMS) - claims_before
        lag_sum, lag_count = (a - b for a, b in zip(self.lag(), lag_before, strict=True))
        n = max(len(plan), 1)
        return {
            "offered_rate": rate,
            "achieved_rate": round(achieved, 1),
            "messages": len(plan),
            "worker_cpu_s_per_1000": round(used / n * 1000, 3),
            "claims_per_1000": round(claims / n * 1000, 1),
            "mean_lag_ms": round(lag_sum / max(lag_count, 1) * 1000, 2),
        }

    def lag(self) -> tuple[float, float]:
        return self.metric(f"{LAG}_sum"), self.metric(f"{LAG}_count")

    async def idle_wake(self, samples: int) -> float:
        """Median lag (ms) of single commits, each after a second of quiet."""
        lags = []
        for _ in range(samples):
            await asyncio.sleep(1.0)  # pacing: the worker settles into its idle wait
            before = self.lag()
            await self.commit(e2e.Send(len(lags) % len(self.chats), time.time()), self.conns[0])
            while self.lag()[1] == before[1]:
                await asyncio.sleep(0.01)
            lags.append((self.lag()[0] - before[0]) * 1000)
        return round(statistics.median(lags), 2)


async def run(rate: float, duration: float, repeats: int, idle_samples: int) -> dict[str, Any]:
    env = {**os.environ, "DATABASE_URL": e2e.DATABASE_URL, "REDIS_URL": e2e.REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    layer = redis.Redis.from_url(e2e.REDIS_URL)
    layer.flushdb()
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(layer.flushdb)
        conns = []
        for _ in range(e2e.PRODUCERS):
            conns.append(await psycopg.AsyncConnection.connect(e2e.DATABASE_URL, autocommit=True))
            stack.push_async_callback(conns[-1].close)
        chats = await e2e.seed(conns[0], 250, 2, 1)
        bench = WorkerBench(conns, chats)
        bench.metrics_port = hubclients.free_port()
        worker_env = dict(env, MESSENGER_REALTIME_METRICS_PORT=str(bench.metrics_port))
        argv = [sys.executable, "manage.py", "dispatch_realtime"]
        worker = await hubclients.Service.start("worker", argv, worker_env, r"\bdispatching\b")
        stack.push_async_callback(worker.stop)
        bench.pid = worker.proc.pid
        await bench.step(rate, 1.0)  # warm-up
        host = hubclients.host_busy()
        began = time.time()
        steps = [await bench.step(rate, duration) for _ in range(repeats)]
        host_busy = (hubclients.host_busy() - host) / (time.time() - began)
        return {
            "wake_coalesce": os.environ.get("MESSENGER_REALTIME_WAKE_COALESCE", "default"),
            "steps": steps,
            "host_cores_busy": round(host_busy, 2),
            "idle_wake_lag_median_ms": await bench.idle_wake(idle_samples),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idle-samples", type=int, default=20)
    args = parser.parse_args()
    results = asyncio.run(run(args.rate, args.duration, args.repeats, args.idle_samples))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
