"""PostgreSQL's CPU per message: the outbox's share against the owner's own write (issue 29).
`python bench/pg_cost.py [--messages N] [--rate R] [--private [--setting NAME=VALUE ...]]
[--statements]`.

On a fresh scratch database, N messages are committed at R per second, twice:
- the owner's own write only (the chat's `last_seq`, the message row): what the product
  would cost PostgreSQL without realtime;
- the owner's transaction as it is (plus the stream offset, the outbox row and NOTIFY:
  bench/e2e.py SEND_SQL), with the worker running (its claims and outcomes; its pushes go
  to a Redis no hub reads), until every row is Done; then those rows' retention (the
  worker's own DELETE, dispatch/sql.py, in RETENTION_BATCH batches).
Then, as information beside the parts (not in them), a VACUUM of the outbox: what is
left to clean up of the run's rows (dead index entries, dead tuples not yet vacuumed).

PostgreSQL's CPU, from just before the first commit to just after the last row is
settled, is by default that of every `postgres` process of the machine (so run it on a
quiet machine; a process that ends within the span, an autovacuum worker, takes its CPU
with it). `--private` runs it on a cluster of the bench's own instead (initdb in a
temporary directory, a free port, PostgreSQL's defaults, fsync on as on this machine,
pg_stat_statements preloaded; `--setting NAME=VALUE` adds server settings) and counts
only that cluster's processes: its postmaster, its children, and the children it reaped
(bench/private_postgres.py), so other engineers' tests on the machine's own PostgreSQL
do not count.
Prints JSON: CPU-ms per message of each part, the ratio, and the with-outbox phase's
WAL bytes and the outbox's writes (rows inserted, updated, HOT-updated, deleted) and
index sizes. With `--statements`, on a server that preloads pg_stat_statements
(`--private` does; the machine's own does not), also the with-outbox phase's statements
by total execution time: calls, rows, ms per message, and each outbox index's scans.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from bench import e2e, hubclients  # noqa: E402
from bench.private_postgres import PrivatePostgres  # noqa: E402
from bench.recovery import TICK, postgres_cpu  # noqa: E402
from messenger_realtime.uuid7 import uuid7  # noqa: E402

DATABASE_URL = os.environ.get("PGCOST_DATABASE_URL") or hubclients.sibling_url(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger", "/messenger_bench_pgcost"
)
REDIS_URL = os.environ.get("PGCOST_REDIS_URL") or hubclients.sibling_url(
    "REDIS_URL", "redis://127.0.0.1:6379/0", "/13"
)

# The owner's own write, without realtime: SEND_SQL without its stream and outbox parts.
OWNER_ONLY_SQL = """
WITH c AS (UPDATE messenger_chat SET last_seq = last_seq + 1 WHERE id = %(chat)s
           RETURNING id, last_seq)
INSERT INTO messenger_message (id, chat_id, seq, sender_id, kind, body, card_text, sent_at)
SELECT %(message)s, id, last_seq, %(sender)s, 'Text', %(body)s, '', now() FROM c
"""
PENDING = "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending'"
TOP_STATEMENTS = """
SELECT calls, rows, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 15
"""
# The outbox's writes (the cumulative counters: the phase's are a difference) and WAL.
TABLE_STATS = """
SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count,
       pg_current_wal_lsn()
FROM pg_stat_user_tables WHERE relid = 'messenger.realtime_outbox'::regclass
"""
INDEX_STATS = """
SELECT indexrelname, idx_scan, pg_relation_size(indexrelid)
FROM pg_stat_user_indexes WHERE relid = 'messenger.realtime_outbox'::regclass
ORDER BY indexrelname
"""
WAL_DIFF = "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint"
# Who each of the server's processes is: a session's application_name (the worker's say
# messenger-realtime-dispatch, the bench's pg_cost-owner), else its backend type.
PROCESSES = """
SELECT pid, coalesce(nullif(application_name, ''), backend_type) FROM pg_stat_activity
"""


async def cpu_by_process(conn: Any) -> dict[str, float]:
    """CPU seconds so far of each of the server's processes (on this machine), by who it is."""
    by: dict[str, float] = {}
    for pid, who in await (await conn.execute(PROCESSES)).fetchall():
        fields = hubclients.proc_stat(pid)
        if fields is not None:
            by[who] = by.get(who, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return by


async def commit_all(conn: Any, statement: str, chats: list[Any], count: int, rate: float) -> None:
    for _ in range(count):
        chat = random.choice(chats)
        params = {"chat": chat.id, "message": uuid7(), "sender": chat.members[0]}
        await conn.execute(statement, {**params, "entry": uuid7(), "body": "hello"})
        await asyncio.sleep(1 / rate)  # the commit rate (a bench, not a test)


async def table_stats(conn: Any) -> tuple[Any, ...]:
    # A session's counters reach the shared statistics when it is idle (at most a second
    # late): the worker has ended by now, the bench's session is flushed here.
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await asyncio.sleep(1.2)
    return tuple(await (await conn.execute(TABLE_STATS)).fetchone())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if not args.private:
        return await measure(args, DATABASE_URL, postgres_cpu)
    settings = {"shared_preload_libraries": "pg_stat_statements"}
    settings.update(dict(s.split("=", 1) for s in args.setting))
    directory = Path(tempfile.mkdtemp(prefix="pg-cost-"))
    directory.chmod(0o755)  # the postgres user runs the private cluster below it
    postgres = PrivatePostgres(directory / "pg", hubclients.free_port(), settings)
    try:
        postgres.start()
        url = postgres.url.rsplit("/", 1)[0] + "/messenger_bench_pgcost"
        result = await measure(args, url, postgres.cpu)
        result["private_cluster"] = {"port": postgres.port, "settings": settings}
        return result
    finally:
        postgres.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def measure(
    args: argparse.Namespace, database_url: str, postgres_cpu: Callable[[], float]
) -> dict[str, Any]:
    import psycopg

    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": REDIS_URL}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", PYTHONUNBUFFERED="1")
    await e2e.check_call(sys.executable, "scripts/ensure_database.py", "--fresh", env=env)
    await e2e.check_call(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    n = args.messages
    result: dict[str, Any] = {"messages": n, "rate_per_s": args.rate}
    async with contextlib.AsyncExitStack() as stack:
        conn = await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, application_name="pg_cost-owner"
        )
        stack.push_async_callback(conn.close)
        chats = await e2e.seed(conn, 50, 2, 1)
        await conn.execute("VACUUM ANALYZE")

        before = postgres_cpu()
        await commit_all(conn, OWNER_ONLY_SQL, chats, n, args.rate)
        owner_only = postgres_cpu() - before

        worker = await hubclients.Service.start(
            "pgcost-worker",
            [sys.executable, "manage.py", "dispatch_realtime"],
            {**env, "MESSENGER_REALTIME_METRICS_PORT": "0"},
            r"\bdispatching\b",
        )
        stack.push_async_callback(worker.stop)
        await asyncio.sleep(2)  # the worker's start-up reads settle (a bench, not a test)
        if args.statements:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT pg_stat_statements_reset()")
        indexes_before = {n: s for n, s, _ in await (await conn.execute(INDEX_STATS)).fetchall()}
        stats_before = await table_stats(conn)
        processes_before = await cpu_by_process(conn)
        before = postgres_cpu()
        await commit_all(conn, e2e.SEND_SQL, chats, n, args.rate)
        while True:
            row = await (await conn.execute(PENDING)).fetchone()
            if row is None or row[0] == 0:
                break
            await asyncio.sleep(0.2)
        with_outbox = postgres_cpu() - before
        processes = await cpu_by_process(conn)
        await worker.stop()
        # Per message, each process's share (the worker's sessions together: claims and
        # outcomes on one, the build's domain reads on another, the lease, LISTEN); what
        # no live process accounts for ended within the phase (autovacuum workers).
        shares = {
            who: round((cpu - processes_before.get(who, 0.0)) / n * 1000, 3)
            for who, cpu in sorted(processes.items())
        }
        shares["ended within the phase"] = round(
            (with_outbox - sum(processes.values()) + sum(processes_before.values())) / n * 1000,
            3,
        )
        result["with_outbox_cpu_ms_per_message_by_process"] = shares
        stats_after = await table_stats(conn)
        ins, upd, hot, dele, autovacuums = (
            b - a for a, b in zip(stats_before[:5], stats_after[:5], strict=True)
        )
        wal = await (await conn.execute(WAL_DIFF, (stats_after[5], stats_before[5]))).fetchone()
        result["outbox_writes"] = {
            "inserted": ins,
            "updated": upd,
            "hot_updated": hot,
            "deleted": dele,
            "autovacuums": autovacuums,
            "wal_bytes_per_message": round(wal[0] / n) if wal else None,
        }
        indexes = await (await conn.execute(INDEX_STATS)).fetchall()
        result["outbox_indexes"] = {
            name: {"scans": scans - indexes_before.get(name, 0), "bytes": size}
            for name, scans, size in indexes
        }
        if args.statements:
            rows = await (await conn.execute(TOP_STATEMENTS)).fetchall()
            result["statements"] = [
                {"calls": c, "rows": r, "ms_per_message": round(t / n, 4), "query": q}
                for c, r, t, q in rows
            ]

        import django

        django.setup()
        from messenger_realtime.dispatch import sql

        before = postgres_cpu()
        deleted = 0
        while True:
            cursor = await conn.execute(sql.DELETE_DONE, {"older_than": 0, "limit": 1000})
            if cursor.rowcount <= 0:
                break
            deleted += cursor.rowcount
        retention = postgres_cpu() - before
        before = postgres_cpu()
        await conn.execute("VACUUM messenger.realtime_outbox")
        vacuum = postgres_cpu() - before
    result.update(
        {
            "owner_only_cpu_ms_per_message": round(owner_only / n * 1000, 3),
            "with_outbox_cpu_ms_per_message": round(with_outbox / n * 1000, 3),
            "retention_cpu_ms_per_row": round(retention / max(deleted, 1) * 1000, 3),
            "rows_deleted": deleted,
            # The figure: the owner's transaction, the worker and retention.
            "all_cpu_ms_per_message": round((with_outbox + retention) / n * 1000, 3),
            "vacuum_after_cpu_ms_per_message": round(vacuum / n * 1000, 3),
            "outbox_share": round(
                (with_outbox + retention - owner_only) / (with_outbox + retention), 3
            ),
            "ratio_all_to_owner_only": round((with_outbox + retention) / owner_only, 2),
            "host_load": os.getloadavg()[0],
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--rate", type=float, default=200.0, help="commits per second")
    parser.add_argument(
        "--statements", action="store_true", help="per statement (pg_stat_statements)"
    )
    parser.add_argument(
        "--private", action="store_true", help="on a PostgreSQL cluster of its own, started here"
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting of the private cluster (repeatable)",
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
