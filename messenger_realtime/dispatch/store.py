"""The worker's hot-path SQL against messenger.realtime_outbox, explicit and commented.

Every statement here runs on the worker's own autocommit psycopg connection. The claim is
a single statement (so a single short transaction) that commits before any push; the
outcomes of a batch are written in one short transaction after the pushes. Each outcome
carries the row_version its claim produced, so an outcome never overwrites a row that
changed meanwhile (an admin requeue or quarantine, or another runner after failover).
"""

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import args_row

# Rows whose attempts already reached MAX_ATTEMPTS before this claim never got an outcome
# (the worker died while delivering them, MAX_ATTEMPTS times): quarantine them at claim
# instead of letting a poison row crash the worker forever.
EXHAUSTED_ERROR = "AttemptsExhausted: no outcome recorded within MAX_ATTEMPTS claims"

# Claim up to %(limit)s due rows in insert (UUIDv7) order. The status filter is the
# cursor (never "id > last seen": v7 order is insert order, not commit order). SKIP LOCKED
# keeps a second runner (failover lag, --no-lock) on disjoint rows. Attempts are
# pre-incremented and next_attempt_at pushed out by the backoff for the new attempt
# count, all on the database clock: a crash before the outcome means a retry after
# backoff, never a lost row. The partial index ix_rto_pending_id serves the ORDER BY.
CLAIM_SQL = """
WITH due AS (
    SELECT id FROM messenger.realtime_outbox
    WHERE status = 'Pending' AND next_attempt_at <= now()
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN o.attempts >= %(max_attempts)s THEN 'Quarantined' ELSE 'Pending' END,
    last_error = CASE WHEN o.attempts >= %(max_attempts)s THEN %(exhausted)s
                      ELSE o.last_error END,
    attempts = CASE WHEN o.attempts >= %(max_attempts)s THEN o.attempts
                    ELSE o.attempts + 1 END,
    next_attempt_at = now() + make_interval(
        secs => (%(delays)s::float8[])[LEAST(o.attempts + 1, cardinality(%(delays)s::float8[]))]),
    updated_at = now(),
    row_version = o.row_version + 1
FROM due
WHERE o.id = due.id
RETURNING o.id, o.kind, o.target_kind, o.chat_id, o.target_user_id, o.message_id,
          o.ref_id, o.session_kind, o.seq, o.status, o.attempts, o.row_version,
          o.created_at
"""

# The outcome statements below join the batch's (id, row_version) pairs; "o.id = ANY(ids)"
# lets the planner find the rows through the primary key instead of hashing the whole
# table (it guesses the unnest's row count badly and picked a sequential scan at 20k rows).

# Success: Done, last_error cleared; lag (now - created_at) returned for the SLO metric.
MARK_DONE_SQL = """
UPDATE messenger.realtime_outbox AS o SET
    status = 'Done', last_error = NULL, updated_at = now(), row_version = o.row_version + 1
FROM unnest(%(ids)s::uuid[], %(versions)s::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)s::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = 'Pending'
RETURNING o.id, extract(epoch FROM now() - o.created_at)::float8 AS lag_seconds
"""

# Failure: stays Pending (next_attempt_at was already set by the claim) unless this was
# attempt MAX_ATTEMPTS or the failure is permanent, then Quarantined. Never dropped.
MARK_FAILED_SQL = """
UPDATE messenger.realtime_outbox AS o SET
    status = CASE WHEN t.permanent OR o.attempts >= %(max_attempts)s
                  THEN 'Quarantined' ELSE 'Pending' END,
    last_error = left(t.error, 512), updated_at = now(), row_version = o.row_version + 1
FROM unnest(%(ids)s::uuid[], %(versions)s::bigint[], %(errors)s::text[],
            %(permanent)s::bool[]) AS t(id, version, error, permanent)
WHERE o.id = ANY(%(ids)s::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = 'Pending'
RETURNING o.id, o.status, o.kind, o.chat_id, o.attempts
"""

# Graceful stop: rows claimed but never pushed get their attempt back and are due now,
# so the next runner takes them at once instead of after a backoff.
RELEASE_SQL = """
UPDATE messenger.realtime_outbox AS o SET
    attempts = greatest(o.attempts - 1, 0), next_attempt_at = now(), updated_at = now(),
    row_version = o.row_version + 1
FROM unnest(%(ids)s::uuid[], %(versions)s::bigint[]) AS t(id, version)
WHERE o.id = ANY(%(ids)s::uuid[]) AND o.id = t.id AND o.row_version = t.version
  AND o.status = 'Pending'
"""

# Retention: one bounded batch of old Done rows (ix_rto_done_updated); Pending and
# Quarantined rows are never deleted.
DELETE_DONE_SQL = """
DELETE FROM messenger.realtime_outbox
WHERE id IN (
    SELECT id FROM messenger.realtime_outbox
    WHERE status = 'Done' AND updated_at < now() - make_interval(secs => %(older_than)s)
    LIMIT %(limit)s
)
"""


class ClaimedRow(NamedTuple):
    """One claimed row, built positionally from CLAIM_SQL's RETURNING list (same order):
    a tuple is the cheapest row object, and the claim returns thousands per second."""

    id: UUID
    kind: str
    target_kind: str
    chat_id: UUID | None
    target_user_id: UUID | None
    message_id: UUID | None
    ref_id: UUID | None
    session_kind: str | None
    seq: int | None
    status: str  # Pending, or Quarantined when the claim found its attempts exhausted
    attempts: int
    row_version: int
    created_at: datetime


@dataclass(frozen=True)
class Failure:
    row: ClaimedRow
    error: str  # class and code only: no body, no PII
    permanent: bool = False


@dataclass
class Outcomes:
    done: list[tuple[UUID, float]]  # id, lag seconds (now - created_at)
    retried: list[UUID]
    quarantined: list[tuple[UUID, str, UUID | None, int]]  # id, kind, chat_id, attempts
    stale: int  # outcomes skipped because the row changed after its claim


Conn = psycopg.AsyncConnection[Any]


async def claim(conn: Conn, limit: int, delays: list[float], max_attempts: int) -> list[ClaimedRow]:
    async with conn.cursor(row_factory=args_row(ClaimedRow)) as cur:
        await cur.execute(
            CLAIM_SQL,
            {
                "limit": limit,
                "delays": delays,
                "max_attempts": max_attempts,
                "exhausted": EXHAUSTED_ERROR,
            },
        )
        rows = await cur.fetchall()
    return sorted(rows, key=lambda row: row.id)  # RETURNING order is unspecified


async def record_outcomes(
    conn: Conn,
    done: list[ClaimedRow],
    failed: list[Failure],
    released: list[ClaimedRow],
    max_attempts: int,
) -> Outcomes:
    """Write a batch's outcomes in one short transaction.

    The common case (every row Done) is one autocommit statement: one round trip
    instead of BEGIN / UPDATE / COMMIT.
    """
    outcomes = Outcomes([], [], [], 0)
    several = sum(map(bool, (done, failed, released))) > 1
    async with conn.transaction() if several else _no_transaction():
        if done:
            cur = await conn.execute(MARK_DONE_SQL, _keys(done))
            outcomes.done = [(row_id, lag) for row_id, lag in await cur.fetchall()]
            outcomes.stale += len(done) - len(outcomes.done)
        if failed:
            params = _keys([f.row for f in failed])
            params.update(
                errors=[f.error for f in failed],
                permanent=[f.permanent for f in failed],
                max_attempts=max_attempts,
            )
            cur = await conn.execute(MARK_FAILED_SQL, params)
            changed = await cur.fetchall()
            outcomes.stale += len(failed) - len(changed)
            for row_id, status, kind, chat_id, attempts in changed:
                if status == "Quarantined":
                    outcomes.quarantined.append((row_id, kind, chat_id, attempts))
                else:
                    outcomes.retried.append(row_id)
        if released:
            await conn.execute(RELEASE_SQL, _keys(released))
    return outcomes


# Backlog gauges: count and oldest age of Pending rows (the partial index serves it).
PENDING_STATS_SQL = """
SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM messenger.realtime_outbox WHERE status = 'Pending'
"""


async def pending_stats(conn: Conn) -> tuple[int, float]:
    cur = await conn.execute(PENDING_STATS_SQL)
    row = await cur.fetchone()
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


async def delete_done(conn: Conn, older_than: float, limit: int) -> int:
    cur = await conn.execute(DELETE_DONE_SQL, {"older_than": older_than, "limit": limit})
    return cur.rowcount


@contextlib.asynccontextmanager
async def _no_transaction() -> AsyncIterator[None]:
    yield  # a single statement on an autocommit connection is its own transaction


def _keys(rows: list[ClaimedRow]) -> dict[str, Any]:
    return {"ids": [r.id for r in rows], "versions": [r.row_version for r in rows]}
