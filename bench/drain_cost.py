"""Where a no-op drain's CPU goes, row by row (issue 49, item 3).
`python bench/drain_cost.py [--rows N] [--rounds R] [--quick]` (--quick: the seconds-long
smoke of tests/e2e/test_bench.py, 2,000 rows, one round).

On a PostgreSQL cluster of its own (bench/private_postgres.py: PostgreSQL's defaults,
pg_stat_statements preloaded; no other work on the machine counts), bench/run.py's
drains one after the other, R rounds:
- `spec_sql`: the spec's claim and outcome as a bare SQL loop on one connection (no
  worker: bench/run.py's SPEC_CLAIM_SQL);
- `ours`: our dispatcher draining into a no-op publisher (bench/run.py's drain);
- `pgqueuer`: PgQueuer at bench/peers.py's settings.
Each over the same N seeded rows (jobs), timed and charged from the first claim to the
last outcome: not the seed, not PgQueuer's enqueue. For each: rows/s, and CPU per row of
PostgreSQL (the cluster's processes: backends, autovacuum, WAL writer) and of this
process (the worker: its event loop and its build thread; for `spec_sql`, the loop's
client). With PostgreSQL's execution time per row by statement (pg_stat_statements) and,
for ours, how much of the drain its claim session was busy (claims run back to back
there: the pipeline's critical path). Prints JSON.
"""

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHILD = "DRAIN_COST_POSTMASTER"  # set: this process measures; unset: it runs the cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke (CI)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 2000, 1
    if CHILD in os.environ:
        print(json.dumps(measure_all(args.rows, args.rounds), indent=2))
        return
    sys.path.insert(0, str(ROOT))
    from bench import hubclients
    from bench.private_postgres import PrivatePostgres

    directory = Path(tempfile.mkdtemp(prefix="drain-cost-"))
    directory.chmod(0o755)  # the postgres user runs the private cluster below it
    settings = {"shared_preload_libraries": "pg_stat_statements"}
    postgres = PrivatePostgres(directory / "pg", hubclients.free_port(), settings)
    postgres.start()
    try:
        env = dict(
            os.environ,
            DATABASE_URL=postgres.url.rsplit("/", 1)[0] + "/messenger_bench_drain",
            **{CHILD: str(postgres.postmaster_pid())},
        )
        python = sys.executable
        for argv in (
            [python, "scripts/ensure_database.py", "--fresh"],
            [python, "manage.py", "migrate", "--noinput", "-v0"],
            [python, __file__, *sys.argv[1:]],
        ):
            subprocess.run(argv, cwd=ROOT, env=env, check=True)
    finally:
        postgres.stop()


def measure_all(rows: int, rounds: int) -> dict[str, Any]:
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
    import peers  # bench/peers.py
    import psycopg
    import run  # bench/run.py: seeds, drains (sets Django up)

    from bench.private_postgres import cluster_cpu
    from messenger_realtime.dispatch import connections as db
    from messenger_realtime.ops import metrics

    logging.disable(logging.WARNING)  # as bench/run.py runs its drains
    postmaster = int(os.environ[CHILD])
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def statements(reset: bool = False) -> list[dict[str, Any]]:
        with psycopg.connect(db.conninfo(), autocommit=True) as conn:
            if reset:
                conn.execute("SELECT pg_stat_statements_reset()")
                return []
            found = conn.execute(
                "SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 60)"
                " FROM pg_stat_statements WHERE calls > 1 AND query NOT LIKE '%%pg_stat%%'"
                " ORDER BY total_exec_time DESC LIMIT 5"
            ).fetchall()
        return [
            {"calls": c, "exec_us_per_row": round(ms * 1000 / rows, 1), "statement": q}
            for c, ms, q in found
        ]

    def claim_busy() -> float:
        return sum(
            s.value for s in metrics.claim_duration.collect()[0].samples if s.name.endswith("_sum")
        )

    def charged(name: str, drain: Callable[[], float]) -> dict[str, Any]:
        """drain() returns rows/s; CPU is read around it (see the module's docstring)."""
        statements(reset=True)
        cpu = (cluster_cpu(postmaster), time.process_time(), claim_busy())
        started = time.perf_counter()
        rate = drain()
        wall = time.perf_counter() - started
        return figures(name, rate, wall, cpu, statements())

    def figures(name: str, rate: float, wall: float, cpu: tuple[float, ...], top: Any) -> Any:
        result = {
            "drain": name,
            "rows_per_s": round(rate),
            "postgres_cpu_us_per_row": round((cluster_cpu(postmaster) - cpu[0]) / rows * 1e6),
            "worker_cpu_us_per_row": round((time.process_time() - cpu[1]) / rows * 1e6),
            "statements": top,
        }
        if name == "ours":
            result["claim_session_busy"] = round((claim_busy() - cpu[2]) / wall, 2)
        print(f"  {name}: {result['rows_per_s']:,} rows/s", file=sys.stderr)
        return result

    def spec_sql() -> dict[str, Any]:
        run.seed(rows)
        seed, run.seed = run.seed, lambda n: None  # sql_loop seeds first: seeded already
        try:
            return charged("spec_sql", lambda: run.sql_loop(rows, run.SPEC_CLAIM_SQL))
        finally:
            run.seed = seed

    def ours() -> dict[str, Any]:
        run.seed(rows)
        return charged("ours", lambda: asyncio.run(run.drain(rows, run.Noop())))

    def pgqueuer() -> dict[str, Any]:
        # Charged from the end of its enqueue (peers._prepare runs between the two).
        cpu: list[Any] = []
        prepare = peers._prepare

        async def prepared(*args: Any) -> None:
            await prepare(*args)
            statements(reset=True)
            cpu.extend((cluster_cpu(postmaster), time.process_time(), claim_busy()))

        peers._prepare = prepared
        try:
            rate = peers.pgqueuer_drain(rows)["rows_per_s"]
        finally:
            peers._prepare = prepare
        return figures("pgqueuer", rate, rows / rate, tuple(cpu), statements())

    runs = []
    for round_ in range(rounds):
        print(f"round {round_ + 1}/{rounds}", file=sys.stderr)
        runs += [spec_sql(), ours(), pgqueuer()]
    return {"rows": rows, "cores": os.cpu_count(), "runs": runs}


if __name__ == "__main__":
    main()
