"""The backlog gauges' read with a day-scale backlog (issue 29):
`python bench/pending_stats.py [--rows N]` (default 1,000,000 Pending rows, due tomorrow).

Times the statement the leader runs every STATS_INTERVAL, as it was (count(*) and
min(created_at) over every Pending row) and as it is (dispatch/sql.py PENDING_STATS,
exact up to store.PENDING_EXACT_UP_TO, then the planner's estimate), median of 21 runs
each after a warm-up, on a fresh database. Prints JSON.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import psycopg  # noqa: E402

from bench import e2e, hubclients  # noqa: E402

DATABASE_URL = os.environ.get("STATS_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_stats"
)
BEFORE = """
SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM messenger.realtime_outbox WHERE status = 'Pending'
"""


async def timed(conn: psycopg.AsyncConnection, statement: str, params: object) -> float:
    for _ in range(3):
        await (await conn.execute(statement, params)).fetchall()
    runs = []
    for _ in range(21):
        began = time.perf_counter()
        await (await conn.execute(statement, params)).fetchall()
        runs.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(runs), 2)


async def run(rows: int) -> dict[str, object]:
    env = {**os.environ, "DATABASE_URL": DATABASE_URL}
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    os.environ["DATABASE_URL"] = DATABASE_URL
    import django

    django.setup()
    from messenger_realtime.dispatch import sql, store

    conn = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
    try:
        await conn.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id,"
            " next_attempt_at) SELECT gen_random_uuid(), 'MessageReceived', 'ChatGroup',"
            " gen_random_uuid(), now() + interval '1 day' FROM generate_series(1, %s)",
            [rows],
        )
        await conn.execute("VACUUM ANALYZE messenger.realtime_outbox")
        began = time.perf_counter()
        count, _ = await store.pending_stats(conn)
        gauge_ms = (time.perf_counter() - began) * 1000
        return {
            "pending_rows": rows,
            "before_ms": await timed(conn, BEFORE, None),
            "now_ms": await timed(
                conn, sql.PENDING_STATS, {"exact_up_to": store.PENDING_EXACT_UP_TO}
            ),
            "estimate_ms": await timed(conn, sql.PENDING_ESTIMATE, None),
            "gauge_reads": count,
            "one_gauge_refresh_ms": round(gauge_ms, 2),
        }
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    print(json.dumps(asyncio.run(run(parser.parse_args().rows)), indent=2))


if __name__ == "__main__":
    main()
