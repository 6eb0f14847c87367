"""Peer queue libraries draining N pre-enqueued no-op jobs: pgqueuer and procrastinate.

Each library runs with its own documented API and durable tables on the server's default
synchronous_commit, so the figures can sit next to ours in bench/run.py. Only the drain is
timed: from the consumer start until it has returned with all N jobs finished.
`python bench/peers.py --n 20000` prints both results as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DATABASE_URL = os.environ.get(
    "PEERS_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messenger_bench_peers"
)
# procrastinate installs into the search_path, so a schema of its own makes "fresh" a DROP.
PROCRASTINATE_SCHEMA = "procrastinate_peer"


def ensure_database(url: str = DATABASE_URL) -> None:
    """Create the benchmark database through the `postgres` maintenance db if it is missing."""
    params = conninfo_to_dict(url)
    name = str(params.pop("dbname"))
    with psycopg.connect(make_conninfo("", **{**params, "dbname": "postgres"}), autocommit=True) as c:
        if c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


async def _assert_durable(conn: psycopg.AsyncConnection[Any], prefix: str) -> None:
    """Fail if a table of the library is UNLOGGED or the session would commit asynchronously."""
    cur = await conn.execute(
        "SELECT count(*) FILTER (WHERE relpersistence = 'u'), count(*) FROM pg_class"
        " WHERE relkind = 'r' AND relname LIKE %s",
        (prefix + "%",),
    )
    unlogged, tables = await cur.fetchone() or (0, 0)
    assert tables > 0 and unlogged == 0, f"{prefix}: {unlogged}/{tables} unlogged tables"
    cur = await conn.execute("SHOW synchronous_commit")
    assert (await cur.fetchone() or ("",))[0] == "on", "synchronous_commit is not on"


async def _pgqueuer(n: int, batch_size: int, workers: int, max_tasks: int | None) -> dict[str, Any]:
    from pgqueuer import Job, Queries, QueueManager

    admin = await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
    try:
        queries = Queries.from_psycopg_connection(admin)
        await queries.uninstall()  # `pgq uninstall` + `pgq install`: default durability=durable
        await queries.install()
        await _assert_durable(admin, "pgqueuer")
        # The list form of enqueue is its batch insert (one UNNEST statement).
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)

        processed = acked = 0
        done_at = 0.0

        class AckCountingQueries(Queries):
            """Stops the run once every job's final status write (DELETE + log row) is done."""

            async def log_jobs(self, job_status: Any) -> None:
                nonlocal acked, done_at
                await super().log_jobs(job_status)
                acked += len(job_status)
                if acked >= n and not done_at:
                    # run() loops forever; its teardown (up to 1 s for the LISTEN watcher's
                    # notifies() timeout) is not part of the drain, so the clock stops here.
                    done_at = time.perf_counter()
                    for qm in managers:
                        qm.shutdown.set()

        async def noop(job: Job) -> None:
            nonlocal processed
            processed += 1

        # Each QueueManager drives one connection (queries are serialised on it), so more
        # managers in the same event loop means more statements in flight on the server.
        conns = [
            await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True)
            for _ in range(workers)
        ]
        managers = [QueueManager(AckCountingQueries.from_psycopg_connection(c)) for c in conns]
        for qm in managers:
            qm.entrypoint("noop")(noop)
        start = time.perf_counter()
        await asyncio.gather(
            *(
                qm.run(batch_size=batch_size, max_concurrent_tasks=max_tasks)
                for qm in managers
            )
        )
        elapsed = done_at - start
        for c in conns:
            await c.close()

        cur = await admin.execute(
            "SELECT (SELECT count(*) FROM pgqueuer),"
            " (SELECT count(*) FROM pgqueuer_log WHERE status = 'successful')"
        )
        left, logged = await cur.fetchone() or (-1, -1)
        assert processed == n and left == 0 and logged == n, (processed, left, logged)
    finally:
        await admin.close()
    settings = (
        f"psycopg3 async, {workers} QueueManager(s) x 1 connection in one process,"
        f" batch_size={batch_size}, max_concurrent_tasks={max_tasks or 'unlimited'},"
        " heartbeat_timeout=30s (default), durable tables"
    )
    return {"rows_per_s": n / elapsed, "n": n, "settings": settings}


def pgqueuer_drain(
    n: int, batch_size: int = 200, *, workers: int = 1, max_tasks: int | None = None
) -> dict[str, Any]:
    """Drain n pgqueuer jobs with a no-op entrypoint; returns rows_per_s, n and settings."""
    ensure_database()
    return asyncio.run(_pgqueuer(n, batch_size, workers, max_tasks))


async def _procrastinate(n: int, concurrency: int, delete_jobs: str) -> dict[str, Any]:
    from procrastinate import App, PsycopgConnector

    async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as admin:
        schema = sql.Identifier(PROCRASTINATE_SCHEMA)
        await admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))
        await admin.execute(sql.SQL("CREATE SCHEMA {}").format(schema))

    conninfo = make_conninfo(DATABASE_URL, options=f"-c search_path={PROCRASTINATE_SCHEMA}")
    # Pool: one connection per in-flight job (finish_job) + the fetcher + LISTEN + slack.
    pool_size = concurrency + 3
    app = App(connector=PsycopgConnector(conninfo=conninfo, min_size=pool_size, max_size=pool_size))
    processed = 0

    @app.task(name="noop")
    async def noop() -> None:
        nonlocal processed
        processed += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as check:
            await _assert_durable(check, "procrastinate")
        await noop.batch_defer_async(*({} for _ in range(n)))

        start = time.perf_counter()
        # wait=False: the worker returns once the queue is empty and running jobs are done.
        await app.run_worker_async(
            concurrency=concurrency,
            wait=False,
            delete_jobs=delete_jobs,
            install_signal_handlers=False,
        )
        elapsed = time.perf_counter() - start

        async with await psycopg.AsyncConnection.connect(conninfo) as check:
            cur = await check.execute(
                "SELECT count(*) FILTER (WHERE status <> 'succeeded'), count(*)"
                " FROM procrastinate_jobs"
            )
            pending, total = await cur.fetchone() or (-1, -1)
    expected_rows = 0 if delete_jobs in ("always", "successful") else n
    assert processed == n and pending == 0 and total == expected_rows, (processed, pending, total)
    settings = (
        f"PsycopgConnector pool {pool_size}, run_worker_async(concurrency={concurrency},"
        f" wait=False, delete_jobs={delete_jobs!r}), listen_notify on, durable tables"
    )
    return {"rows_per_s": n / elapsed, "n": n, "settings": settings}


def procrastinate_drain(
    n: int, *, concurrency: int = 16, delete_jobs: str = "never"
) -> dict[str, Any]:
    """Drain n procrastinate jobs with a no-op task; returns rows_per_s, n and settings."""
    ensure_database()
    return asyncio.run(_procrastinate(n, concurrency, delete_jobs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    results = {"pgqueuer": pgqueuer_drain(args.n), "procrastinate": procrastinate_drain(args.n)}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
