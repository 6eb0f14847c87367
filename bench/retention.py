"""Retention at a day's scale while messages flow (issue 29):
`python bench/retention.py [--expired N] [--rate R]`.

A fresh scratch database holds N expired Done rows (default 2,000,000, `updated_at` two
days ago, written with generate_series). The worker starts (retention due at once) while
messages are committed at R per second (bench/e2e.py's SEND_SQL: the owner's
transaction). Measured until retention has deleted every expired row: its rate (rows/s),
the new messages' persist -> Done latency (p50/p95/max, database clock: `updated_at -
created_at` of their Done rows), and the worker's `/health/live` polled every 0.2 s (how
many answers were not 200). Prints JSON.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from bench import connections, e2e, hubclients  # noqa: E402
from messenger_realtime.uuid7 import uuid7  # noqa: E402

DATABASE_URL = os.environ.get("RETENTION_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_retention"
)
REDIS_URL = os.environ.get("RETENTION_REDIS_URL") or hubclients.sibling_url(
    "REDIS_URL", "redis://127.0.0.1:6379/0", "/12"
)

# Expired Done rows, as a day of traffic leaves them (one chat each, no offsets: old rows).
EXPIRED_SQL = """
INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, message_id, seq,
    status, attempts, next_attempt_at, created_at, updated_at, row_version)
SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup', gen_random_uuid(),
    gen_random_uuid(), g, 'Done', 1, now() - interval '2 days', now() - interval '2 days',
    now() - interval '2 days' + g * interval '1 microsecond', 2
FROM generate_series(1, %(rows)s) g
"""
EXPIRED_LEFT = """
SELECT count(*) FROM messenger.realtime_outbox
WHERE status = 'Done' AND updated_at < now() - interval '1 day'
"""
LATENCIES = """
SELECT extract(epoch FROM updated_at - created_at)::float8 FROM messenger.realtime_outbox
WHERE status = 'Done' AND created_at > %(since)s::timestamptz AND message_id IS NOT NULL
"""


def live(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/live", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    env = {**os.environ, "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    result: dict[str, Any] = {"expired_rows": args.expired, "rate_per_s": args.rate}
    async with contextlib.AsyncExitStack() as stack:
        conn = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
        stack.push_async_callback(conn.close)
        chats = await e2e.seed(conn, 20, 2, 1)
        began = time.monotonic()
        await conn.execute(EXPIRED_SQL, {"rows": args.expired})
        await conn.execute("VACUUM ANALYZE messenger.realtime_outbox")
        result["fill_s"] = round(time.monotonic() - began, 1)
        port = hubclients.free_port()
        worker_env = {**env, "MESSENGER_REALTIME_METRICS_PORT": str(port)}
        worker = await hubclients.Service.start(
            "retention-worker",
            [sys.executable, "manage.py", "dispatch_realtime"],
            worker_env,
            r"\bdispatching\b",
        )
        stack.push_async_callback(worker.stop)
        row = await (await conn.execute("SELECT now()")).fetchone()
        assert row is not None
        since = row[0]
        statuses: list[int] = []
        sent = 0
        started = time.monotonic()
        left = args.expired
        while left > 0 and time.monotonic() - started < args.deadline:
            chat = random.choice(chats)
            params = {"chat": chat.id, "message": uuid7(), "sender": chat.members[0]}
            await conn.execute(e2e.SEND_SQL, {**params, "entry": uuid7(), "body": "during"})
            sent += 1
            statuses.append(await asyncio.to_thread(live, port))
            if sent % 10 == 0:
                counted = await (await conn.execute(EXPIRED_LEFT)).fetchone()
                left = int(counted[0]) if counted else 0
            await asyncio.sleep(1 / args.rate)  # the send rate (a bench, not a test)
        took = time.monotonic() - started
        await asyncio.sleep(2)  # the last messages are pushed (a bench, not a test)
        rows = await (await conn.execute(LATENCIES, {"since": since})).fetchall()
        lags = sorted(r[0] * 1000 for r in rows)
        result.update(
            {
                "retention_s": round(took, 1) if left == 0 else None,
                "expired_left": left,
                "retention_rows_per_s": round(args.expired / took) if left == 0 else None,
                "messages": sent,
                "messages_done": len(lags),
                "lag_p50_ms": connections.quantile(lags, 0.5) if lags else None,
                "lag_p95_ms": connections.quantile(lags, 0.95) if lags else None,
                "lag_max_ms": round(lags[-1], 1) if lags else None,
                "health_live_polls": len(statuses),
                "health_live_not_200": sum(1 for s in statuses if s != 200),
            }
        )
    result["host_load"] = os.getloadavg()[0]
    result["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--expired", type=int, default=2_000_000)
    parser.add_argument("--rate", type=float, default=20.0, help="messages/s during retention")
    parser.add_argument("--deadline", type=float, default=300.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
