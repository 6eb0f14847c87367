"""The one place the worker runs SQL (the statements and their why are in sql.py).

The claim is a single statement (so a single short transaction) that commits before any
push; a batch's outcomes are written in one short transaction after its pushes.
"""

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import args_row

from messenger_realtime.dispatch import sql
from messenger_realtime.dispatch.partitions import Partition
from messenger_realtime.dispatch.rows import ClaimedRow, Fate, RowOutcome
from messenger_realtime.exceptions import LeadershipLost
from messenger_realtime.ops import metrics
from messenger_realtime.outbox.enums import URGENT_KINDS
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.enums import RealtimeTargetKind as TargetKind

Conn = psycopg.AsyncConnection[Any]
NO_TARGET = UUID(int=0)  # the walk's cursor before any target
# Claimed rows are built by position from the CLAIMED_ROW columns, split off there.
assert ClaimedRow._fields == sql.CLAIMED_NAMES


@dataclass(frozen=True)
class ClaimShape:
    """How much a claim takes and the backoff it schedules (from the worker's options)."""

    limit: int
    delays: list[float]  # un-jittered backoff per attempt (backoff.delay_table)
    jitter: float
    max_attempts: int


async def prepare_claim_session(conn: Conn) -> None:
    """Pin the claim session's plans to the indexes (sql.CLAIM_SESSION says why)."""
    await conn.execute(sql.CLAIM_SESSION)


async def claim_fair(
    conn: Conn,
    shape: ClaimShape,
    cursor: UUID,
    partition: Partition | None = None,
    lease: Mapping[str, Any] | None = None,
    walks: int = 50,
) -> tuple[list[RowOutcome], UUID]:
    """A fair claim of the targets walked from just after `cursor`; (outcomes, new cursor).

    One statement walks and claims (sql.WALK_AND_CLAIM). `lease`: the leader's proof
    parameters (Leader.lease_proof); the claim takes nothing and raises LeadershipLost
    once that session no longer holds the lock or the lease row names another one.
    None: no lease (--no-lock, benchmarks).

    A walk whose targets hold only rows not due yet (backing off, or suspects) claims
    nothing, and ending there would leave a due row behind them until the next wake: walk
    on, until something is claimed or the walks come round to a target already walked
    (every target with Pending rows was tried once; at most `walks` walks in any case).
    """
    params = _claim_params(
        shape, lease_key=None, lease_pid=None, lease_classid=None, lease_objid=None
    )
    if lease is not None:
        params.update(lease)
    statement = sql.WALK_AND_CLAIM
    if partition is not None:
        params.update(partition.params())
        statement = sql.WALK_AND_CLAIM_IN_PARTITION
    seen: set[UUID] = set()
    for _ in range(walks):
        with metrics.claim_duration.time():
            cur = await conn.execute(statement, {**params, "after": cursor})
            rows = await cur.fetchall()
        (last_key, walked, keys, held), claimed = _walk_and_claimed(rows)
        if not held:
            raise LeadershipLost("the lease is no longer this session's (taken over, or ended)")
        cursor = last_key or NO_TARGET
        outcomes = _outcomes(push_order(claimed), suspect=False)
        came_round = walked < shape.limit or not seen.isdisjoint(keys or ())
        if outcomes or came_round:
            break
        seen.update(keys or ())
    return outcomes, cursor


def _walk_and_claimed(rows: list[Any]) -> tuple[tuple[Any, ...], list[ClaimedRow]]:
    """WALK_AND_CLAIM's rows: the walk's columns every row carries (its end, size, keys,
    whether the lease held) and the claimed rows (none: one row of NULL claim columns)."""
    if not rows:  # (the statement always returns a row; an empty result holds nothing)
        return (None, 0, None, False), []
    walk = tuple(rows[0][sql.CLAIMED_COLUMNS :])
    claimed = [ClaimedRow(*row[: sql.CLAIMED_COLUMNS]) for row in rows if row[0] is not None]
    return walk, claimed


async def claim_suspect(
    conn: Conn, shape: ClaimShape, partition: Partition | None = None
) -> list[RowOutcome]:
    """Claim one suspect (a due row whose last attempt got no outcome), as an outcome to
    be decided; within `partition`, its own only. A suspect the claim itself quarantined
    (attempts exhausted) comes back decided and recorded."""
    params = _claim_params(shape)
    statement = sql.CLAIM_SUSPECT
    if partition is not None:
        params.update(partition.params())
        statement = sql.CLAIM_SUSPECT_IN_PARTITION
    with metrics.claim_duration.time():
        async with conn.cursor(row_factory=args_row(ClaimedRow)) as cur:
            await cur.execute(statement, params)
            rows = await cur.fetchall()
    return _outcomes(rows, suspect=True)


def _claim_params(shape: ClaimShape, **extra: Any) -> dict[str, Any]:
    return {
        "limit": shape.limit,
        "delays": shape.delays,
        "jitter": shape.jitter,
        "max_attempts": shape.max_attempts,
        "exhausted": sql.EXHAUSTED_ERROR,
        **extra,
    }


def _outcomes(rows: list[ClaimedRow], suspect: bool) -> list[RowOutcome]:
    """One outcome per claimed row; those the claim quarantined come back decided."""
    outcomes = [RowOutcome(row, suspect=suspect) for row in rows]
    for outcome in outcomes:
        if outcome.row.status == Status.QUARANTINED:
            outcome.decide(Fate.QUARANTINE, sql.EXHAUSTED_ERROR)
            outcome.recorded = Status.QUARANTINED
    return outcomes


def push_order(rows: list[ClaimedRow]) -> list[ClaimedRow]:
    """RETURNING order is unspecified. Each target (a stream) goes out in its stream's
    order (its offsets; ids for rows without one), the urgent part of each target first
    (its rows up to its newest row of a time-critical kind: an invitation never goes out
    before an older row of its own stream, issue 60), then the rest of every target in
    turn (each target's first row, then each one's second, ...). A quiet chat's row
    therefore goes out in a batch's first chunk, not behind a burst's hundred rows in
    the same batch. Offsets, not ids, order a stream: its counter's lock orders its
    commits, while ids are made by the owners' processes (two in the same millisecond
    may invert)."""
    rows.sort(key=lambda row: row.id)
    streams: dict[UUID | None, list[ClaimedRow]] = {}
    for row in rows:
        target = row.target_user_id if row.target_kind == TargetKind.USER else row.chat_id
        streams.setdefault(target, []).append(row)
    ranked = []
    for stream in streams.values():
        if all(row.stream_offset is not None for row in stream):
            stream.sort(key=lambda row: row.stream_offset or 0)
        urgent = [at for at, row in enumerate(stream) if row.kind in URGENT_KINDS]
        last_urgent = urgent[-1] if urgent else -1
        for at, row in enumerate(stream):
            if at <= last_urgent:
                ranked.append((False, at, row.id, row))
            else:
                ranked.append((True, at - last_urgent, row.id, row))
    ranked.sort(key=lambda entry: entry[:3])
    return [entry[3] for entry in ranked]


async def record(conn: Conn, outcomes: Sequence[RowOutcome], max_attempts: int) -> None:
    """Write every decided, unrecorded outcome of a batch in one short transaction, and
    note on each what the database kept (recorded stays None for a stale outcome).

    The common case (every row Done) is one autocommit statement: one round trip
    instead of BEGIN / UPDATE / COMMIT.
    """
    todo = [o for o in outcomes if o.fate is not None and o.recorded is None]
    done = [o for o in todo if o.fate is Fate.DONE]
    failed = [o for o in todo if o.fate in (Fate.RETRY, Fate.QUARANTINE, Fate.ISOLATE)]
    released = [o for o in todo if o.fate is Fate.RELEASE]
    expired = [o for o in todo if o.fate is Fate.EXPIRE]
    several = sum(map(bool, (done, failed, released, expired))) > 1
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
                suspect=[o.suspect or o.fate is Fate.ISOLATE for o in failed],
                isolate=[o.fate is Fate.ISOLATE for o in failed],
                max_attempts=max_attempts,
            )
            cur = await conn.execute(sql.MARK_FAILED, params)
            for row_id, status in await cur.fetchall():
                by_id[row_id].recorded = Status(status)
        if expired:
            by_id = {o.row.id: o for o in expired}
            params = _keys(expired)
            params["errors"] = [o.error or "" for o in expired]
            cur = await conn.execute(sql.MARK_EXPIRED, params)
            for (row_id,) in await cur.fetchall():
                by_id[row_id].recorded = Status.DONE
        if released:
            by_id = {o.row.id: o for o in released}
            cur = await conn.execute(sql.RELEASE, _keys(released))
            for (row_id,) in await cur.fetchall():
                by_id[row_id].recorded = Status.PENDING


PENDING_EXACT_UP_TO = 10_000  # Pending rows counted one by one; past it, estimated


async def pending_stats(conn: Conn) -> tuple[int, float]:
    """(Pending rows, age in seconds of the oldest) for the backlog gauges: the count is
    exact up to PENDING_EXACT_UP_TO, and past it PostgreSQL's estimate (never below the
    exact bound), so the read stays a few milliseconds with any backlog."""
    cur = await conn.execute(sql.PENDING_STATS, {"exact_up_to": PENDING_EXACT_UP_TO})
    row = await cur.fetchone()
    count, oldest = (int(row[0]), float(row[1])) if row else (0, 0.0)
    if count > PENDING_EXACT_UP_TO:
        cur = await conn.execute(sql.PENDING_ESTIMATE)
        (plan,) = await cur.fetchone() or ([{"Plan": {"Plan Rows": 0}}],)
        count = max(count, int(plan[0]["Plan"]["Plan Rows"]))
    return count, oldest


async def refresh_backlog_gauges(conn: Conn) -> None:
    """The leader's backlog gauges: Pending rows, the oldest one's age, Quarantined rows."""
    count, oldest = await pending_stats(conn)
    metrics.pending.set(count)
    metrics.oldest_pending_age.set(oldest)
    metrics.set_quarantined_rows(await quarantined_counts(conn))


async def quarantined_counts(conn: Conn) -> dict[str, int]:
    """Quarantined rows per kind, for the quarantined-rows gauge."""
    cur = await conn.execute(sql.QUARANTINED_STATS)
    return {str(kind): int(count) for kind, count in await cur.fetchall()}


async def retention_behind(conn: Conn, older_than: float) -> float:
    """Seconds the oldest Done row is past `older_than` (0: retention is caught up)."""
    cur = await conn.execute(sql.RETENTION_BEHIND, {"older_than": older_than})
    row = await cur.fetchone()
    return float(row[0]) if row else 0.0


async def delete_done(conn: Conn, older_than: float, limit: int) -> int:
    """Delete one bounded batch of Done rows older than `older_than` seconds."""
    cur = await conn.execute(sql.DELETE_DONE, {"older_than": older_than, "limit": limit})
    return cur.rowcount


async def ensure_partition_index(conn: Conn, key: int) -> str:
    """Make ix_rto_pending_partition exist and be valid, for partitioned runners (queries.sql
    PARTITION_INDEX_STATE says why only they have it); what was done: "valid" (it was),
    "built", or "busy" (another worker holds the turn `key`: it is building it).

    On an autocommit connection of its own (CREATE INDEX CONCURRENTLY runs outside any
    transaction). An invalid index (a failed build) is dropped and built again."""
    (valid,) = await (await conn.execute(sql.PARTITION_INDEX_STATE)).fetchone() or (None,)
    if valid:
        return "valid"
    (turn,) = await (await conn.execute(sql.PARTITION_INDEX_TURN, {"key": key})).fetchone() or (
        False,
    )
    if not turn:
        return "busy"
    try:
        if valid is False:
            await conn.execute(sql.PARTITION_INDEX_DROP)
        await conn.execute(sql.PARTITION_INDEX_CREATE)
    finally:
        await conn.execute(sql.PARTITION_INDEX_TURN_END, {"key": key})
    return "built"


@contextlib.asynccontextmanager
async def _no_transaction() -> AsyncIterator[None]:
    yield  # a single statement on an autocommit connection is its own transaction


def _keys(outcomes: Sequence[RowOutcome]) -> dict[str, Any]:
    return {
        "ids": [o.row.id for o in outcomes],
        "versions": [o.row.row_version for o in outcomes],
    }
