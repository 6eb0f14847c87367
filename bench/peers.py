"""Peer queue libraries draining N pre-enqueued no-op jobs: pgqueuer and procrastinate.

Each library runs through its documented API, on durable (logged) tables and the server's
default synchronous_commit, so its figure can sit next to ours in bench/run.py. Only the drain
is timed: from the consumer start until every job is processed and its final status written.
`python bench/peers.py --n 20000` prints both results as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# Beside whatever DATABASE_URL points at, on the same server as our own drains.
_BASE = urlsplit(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/x")
DATABASE_URL = os.environ.get("PEERS_DATABASE_URL") or urlunsplit(
    _BASE._replace(path="/messenger_bench_peers")
)
# procrastinate installs into the search_path: a schema of its own makes "fresh" one DROP.
PROCRASTINATE_SCHEMA = "procrastinate_peer"


def ensure_database() -> None:
    """Create the benchmark database through the `postgres` maintenance db if it is missing."""
    name = str(conninfo_to_dict(DATABASE_URL)["dbname"])
    with psycopg.connect(make_conninfo(DATABASE_URL, dbname="postgres"), autocommit=True) as c:
        if c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


async def _prepare(conn: psycopg.AsyncConnection[Any], prefix: str, queue_table: str) -> None:
    """Check durability, then ANALYZE the freshly filled queue table.

    Without ANALYZE the planner would still see the empty table it was created as; a queue in
    steady state has statistics (autovacuum), and both libraries get the same footing.
    """
    cur = await conn.execute(
        "SELECT count(*) FILTER (WHERE relpersistence = 'u'), count(*) FROM pg_class"
        " WHERE relkind = 'r' AND relname LIKE %s",
        (prefix + "%",),
    )
    unlogged, tables = await cur.fetchone() or (0, 0)
    assert tables > 0 and unlogged == 0, f"{prefix}: {unlogged}/{tables} tables are unlogged"
    cur = await conn.execute("SHOW synchronous_commit")
    assert (await cur.fetchone() or ("",))[0] == "on", "synchronous_commit is not on"
    await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(queue_table)))


async def _pgqueuer(n: int, batch_size: int, workers: int, max_tasks: int | None) -> float:
    from pgqueuer import Job, Queries, QueueManager

    async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as admin:
        queries = Queries.from_psycopg_connection(admin)
        await queries.uninstall()  # = `pgq uninstall` + `pgq install` (durability=durable)
        await queries.install()
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)  # lists = one batch INSERT
        await _prepare(admin, "pgqueuer", "pgqueuer")

        processed = acked = 0
        done_at = 0.0

        class AckCountingQueries(Queries):
            """Stops the managers once every job's final status (DELETE + log row) is written."""

            async def log_jobs(self, job_status: Any) -> None:
                nonlocal acked, done_at
                await super().log_jobs(job_status)
                acked += len(job_status)
                if acked >= n and not done_at:
                    # run() never returns by itself, and its teardown (up to 1 s waiting on the
                    # LISTEN watcher's notifies() timeout) is not part of the drain.
                    done_at = time.perf_counter()
                    for qm in managers:
                        qm.shutdown.set()

        async def noop(job: Job) -> None:
            nonlocal processed
            processed += 1

        # A manager serialises all its queries on its one connection, so several managers in
        # the event loop are what puts more than one statement in flight on the server.
        conns = [
            await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
            for _ in range(workers)
        ]
        try:
            managers = [QueueManager(AckCountingQueries.from_psycopg_connection(c)) for c in conns]
            for qm in managers:
                qm.entrypoint("noop")(noop)
            start = time.perf_counter()
            await asyncio.gather(
                *(qm.run(batch_size=batch_size, max_concurrent_tasks=max_tasks) for qm in managers)
            )
        finally:
            for c in conns:
                await c.close()

        cur = await admin.execute(
            "SELECT (SELECT count(*) FROM pgqueuer),"
            " (SELECT count(*) FROM pgqueuer_log WHERE status = 'successful')"
        )
        left, logged = await cur.fetchone() or (-1, -1)
    assert processed == n and left == 0 and logged == n, (processed, left, logged)
    return done_at - start


def pgqueuer_drain(
    n: int, batch_size: int = 200, *, workers: int = 4, max_tasks: int | None = None
) -> dict[str, Any]:
    """Drain n pgqueuer jobs into a no-op entrypoint; returns rows_per_s, n and settings."""
    ensure_database()
    elapsed = asyncio.run(_pgqueuer(n, batch_size, workers, max_tasks))
    settings = (
        f"PsycopgDriver (psycopg3 async), {workers} QueueManagers x 1 connection in one process,"
        f" batch_size={batch_size}, max_concurrent_tasks={max_tasks or 'unlimited'},"
        " other run() defaults (heartbeat_timeout=30s), durability=durable"
    )
    return {"rows_per_s": n / elapsed, "n": n, "settings": settings}


async def _procrastinate(n: int, concurrency: int, workers: int, delete_jobs: str) -> float:
    from procrastinate import App, PsycopgConnector

    async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as admin:
        schema = sql.Identifier(PROCRASTINATE_SCHEMA)
        await admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))
        await admin.execute(sql.SQL("CREATE SCHEMA {}").format(schema))

    conninfo = make_conninfo(DATABASE_URL, options=f"-c search_path={PROCRASTINATE_SCHEMA}")
    # Per worker: one connection per running job (finish_job), its fetcher and its LISTEN.
    size = workers * (concurrency + 2)
    app = App(connector=PsycopgConnector(conninfo=conninfo, min_size=size, max_size=size))
    processed = 0

    @app.task(name="noop")
    async def noop() -> None:
        nonlocal processed
        processed += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        await noop.batch_defer_async(*({} for _ in range(n)))  # one multi-row INSERT
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            await _prepare(conn, "procrastinate", "procrastinate_jobs")

        start = time.perf_counter()
        # wait=False: a worker returns once the queue is empty and its running jobs are done.
        # A worker fetches one job per query, one fetch at a time: more workers overlap them.
        await asyncio.gather(
            *(
                app.run_worker_async(
                    name=f"peer-{i}",
                    concurrency=concurrency,
                    wait=False,
                    delete_jobs=delete_jobs,
                    install_signal_handlers=False,
                )
                for i in range(workers)
            )
        )
        elapsed = time.perf_counter() - start

        async with await psycopg.AsyncConnection.connect(conninfo) as conn:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE status <> 'succeeded'), count(*)"
                " FROM procrastinate_jobs"
            )
            pending, total = await cur.fetchone() or (-1, -1)
    kept = 0 if delete_jobs in ("always", "successful") else n
    assert processed == n and pending == 0 and total == kept, (processed, pending, total)
    return elapsed


def procrastinate_drain(
    n: int, *, concurrency: int = 4, workers: int = 4, delete_jobs: str = "never"
) -> dict[str, Any]:
    """Drain n procrastinate jobs into a no-op task; returns rows_per_s, n and settings."""
    ensure_database()
    elapsed = asyncio.run(_procrastinate(n, concurrency, workers, delete_jobs))
    settings = (
        f"PsycopgConnector (pool {workers * (concurrency + 2)}), {workers} x"
        f" run_worker_async(concurrency={concurrency}, wait=False, delete_jobs={delete_jobs!r})"
        " in one process, listen_notify on, logged tables"
    )
    return {"rows_per_s": n / elapsed, "n": n, "settings": settings}


def main() -> None:
    parser = argparse.ArgumentParser(description="Drain N no-op jobs with pgqueuer, procrastinate.")
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    # procrastinate warns that an App built in __main__ may not be importable by other worker
    # processes; its workers run right here and the task has an explicit name, so it is moot.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    results = {"pgqueuer": pgqueuer_drain(args.n), "procrastinate": procrastinate_drain(args.n)}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
