"""The one place the worker runs SQL (the statements and their why are in sql.py).

The claim is a single statement (so a single short transaction) that commits before any
push; a batch's outcomes are written in one short transaction after its pushes.
"""

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg.rows import args_row

from messenger_realtime.dispatch import sql
from messenger_realtime.dispatch.rows import ClaimedRow, Fate, RowOutcome
from messenger_realtime.ops import metrics
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status

Conn = psycopg.AsyncConnection[Any]


async def claim(
    conn: Conn, limit: int, delays: list[float], jitter: float, max_attempts: int
) -> list[RowOutcome]:
    """Claim up to `limit` due rows, in id order, each as an outcome to be decided.

    Rows the claim itself quarantined (attempts exhausted) come back decided and recorded.
    """
    params = {
        "limit": limit,
        "delays": delays,
        "jitter": jitter,
        "max_attempts": max_attempts,
        "exhausted": sql.EXHAUSTED_ERROR,
    }
    with metrics.claim_duration.time():
        async with conn.cursor(row_factory=args_row(ClaimedRow)) as cur:
            await cur.execute(sql.CLAIM, params)
            rows = await cur.fetchall()
    rows.sort(key=lambda row: row.id)  # RETURNING order is unspecified
    outcomes = [RowOutcome(row) for row in rows]
    for outcome in outcomes:
        if outcome.row.status == Status.QUARANTINED:
            outcome.decide(Fate.QUARANTINE, sql.EXHAUSTED_ERROR)
            outcome.recorded = Status.QUARANTINED
    return outcomes


async def record(conn: Conn, outcomes: Sequence[RowOutcome], max_attempts: int) -> None:
    """Write every decided, unrecorded outcome of a batch in one short transaction, and
    note on each what the database kept (recorded stays None for a stale outcome).

    The common case (every row Done) is one autocommit statement: one round trip
    instead of BEGIN / UPDATE / COMMIT.
    """
    todo = [o for o in outcomes if o.fate is not None and o.recorded is None]
    done = [o for o in todo if o.fate is Fate.DONE]
    failed = [o for o in todo if o.fate in (Fate.RETRY, Fate.QUARANTINE)]
    released = [o for o in todo if o.fate is Fate.RELEASE]
    several = sum(map(bool, (done, failed, released))) > 1
    async with conn.transaction() if several else _no_transaction():
        if done:
            by_id = {o.row.id: o for o in done}
            cur = await conn.execute(sql.MARK_DONE, _keys(done))
            for row_id, lag in await cur.fetchall():
                by_id[row_id].recorded, by_id[row_id].lag = Status.DONE, lag
        if failed:
            by_id = {o.row.id: o for o in failed}
            params = _keys(failed)
            params.update(
                errors=[o.error or "" for o in failed],
                permanent=[o.fate is Fate.QUARANTINE for o in failed],
                max_attempts=max_attempts,
            )
            cur = await conn.execute(sql.MARK_FAILED, params)
            for row_id, status in await cur.fetchall():
                by_id[row_id].recorded = Status(status)
        if released:
            by_id = {o.row.id: o for o in released}
            cur = await conn.execute(sql.RELEASE, _keys(released))
            for (row_id,) in await cur.fetchall():
                by_id[row_id].recorded = Status.PENDING


async def pending_stats(conn: Conn) -> tuple[int, float]:
    """(Pending rows, age in seconds of the oldest) for the backlog gauges."""
    cur = await conn.execute(sql.PENDING_STATS)
    row = await cur.fetchone()
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


async def delete_done(conn: Conn, older_than: float, limit: int) -> int:
    """Delete one bounded batch of Done rows older than `older_than` seconds."""
    cur = await conn.execute(sql.DELETE_DONE, {"older_than": older_than, "limit": limit})
    return cur.rowcount


@contextlib.asynccontextmanager
async def _no_transaction() -> AsyncIterator[None]:
    yield  # a single statement on an autocommit connection is its own transaction


def _keys(outcomes: Sequence[RowOutcome]) -> dict[str, Any]:
    return {
        "ids": [o.row.id for o in outcomes],
        "versions": [o.row.row_version for o in outcomes],
    }
