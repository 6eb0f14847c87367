"""One dispatch pass as a pipeline of overlapping batches.

Claims run back to back on the claim connection, each starting as soon as the one before
proves full; each claimed batch is built (the domain read, off the event loop) while the
one before is pushed; batch N's outcomes are written (the work connection) while batch
N+1 is pushed. At most two batches are claimed ahead of the pushes. The spec's semantics
hold batch by batch: a claim commits before any of its rows is pushed, pushes run outside
transactions and in claim order, every row gets its own outcome, and outcomes are written
and reported in batch order, at most one batch behind the pushes.
"""

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from asgiref.sync import sync_to_async
from django.db import close_old_connections

from messenger_realtime.contracts import build_events
from messenger_realtime.contracts.events import InvalidRow, OutgoingEvent
from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.backoff import delay_table
from messenger_realtime.dispatch.outcomes import PassResult, report_batch
from messenger_realtime.dispatch.push import Pushed, push
from messenger_realtime.outbox.enums import RealtimeOutboxStatus
from messenger_realtime.transport.publisher import describe_error

if TYPE_CHECKING:
    from messenger_realtime.dispatch.dispatcher import Dispatcher

logger = logging.getLogger("messenger_realtime.dispatch.dispatcher")

Conn = psycopg.AsyncConnection[Any]
Built = list[OutgoingEvent | InvalidRow | BaseException]


@dataclass
class Batch:
    rows: list[store.ClaimedRow]  # everything the claim returned
    pending: list[store.ClaimedRow]  # minus the rows the claim itself quarantined
    built: Built  # one event (or why not) per pending row
    next_claim: "asyncio.Task[list[store.ClaimedRow]] | None"  # the batch after, if any


async def run_batches(
    d: "Dispatcher", claim_conn: Conn, work_conn: Conn, result: PassResult, started: float
) -> None:
    """Claim and dispatch batches while they come back full, up to MAX_RUN_DURATION."""
    if d.stop.is_set():
        return
    spawned: set[asyncio.Task[Any]] = set()  # every stage task, settled before returning
    ahead: asyncio.Task[Batch] | None = _spawn(
        spawned, _build_after(d, claim_conn, None, started, spawned)
    )
    recording: asyncio.Task[None] | None = None
    try:
        while ahead is not None:
            batch = await ahead
            ahead = None
            if not batch.rows:
                break
            result.batches += 1
            logger.info("batch claimed", extra={"action": "claim", "rows": len(batch.rows)})
            if batch.next_claim is not None:  # the next batch is being claimed already
                ahead = _spawn(
                    spawned, _build_after(d, claim_conn, batch.next_claim, started, spawned)
                )
            if d.stop.is_set():  # claimed ahead, then asked to stop: give the rows back
                pushed = Pushed(released=batch.pending)
            else:
                pushed = await push(
                    batch.pending, batch.built, d.publisher, d.stop, d.options.publish_timeout
                )
            if recording is not None:
                await recording  # outcomes are written and reported in batch order
            recording = _spawn(spawned, _record(d, work_conn, batch, pushed, result))
            d.heartbeat = time.monotonic()
        if recording is not None:
            await recording
    finally:
        # After a failure mid-pass, let the stages in flight finish (their own errors are
        # secondary) so no statement is abandoned half-sent. Rows claimed ahead and never
        # pushed are retried after their backoff, like any claim whose outcome was lost.
        while pending := [task for task in spawned if not task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)
        for task in spawned:
            if not task.cancelled():
                task.exception()  # retrieved: a secondary error is not reported twice


def _spawn(spawned: set[asyncio.Task[Any]], work: Any) -> asyncio.Task[Any]:
    task = asyncio.create_task(work)
    spawned.add(task)
    return task


async def _build_after(
    d: "Dispatcher",
    conn: Conn,
    claiming: "asyncio.Task[list[store.ClaimedRow]] | None",
    started: float,
    spawned: set[asyncio.Task[Any]],
) -> Batch:
    """Claim (or take the claim already running), start claiming the batch after it as
    soon as this one proves full, then build this one: claims run back to back, at most
    two batches ahead of the pushes, while builds and pushes catch up."""
    rows = await (claiming if claiming is not None else _claim(d, conn))
    pending = [r for r in rows if r.status != RealtimeOutboxStatus.QUARANTINED]
    full = len(rows) == d.options.batch_size
    in_time = time.monotonic() - started < d.options.max_run_duration
    next_claim = None
    if full and in_time and not d.stop.is_set():
        next_claim = _spawn(spawned, _claim(d, conn))
    if d.stop.is_set():  # the rows will be released, not pushed: no need to build them
        return Batch(rows, pending, [], None)
    built = await build(pending, d.port)
    invalid = sum(isinstance(event, InvalidRow) for event in built)
    logger.debug("batch built", extra={"action": "build", "rows": len(built), "invalid": invalid})
    return Batch(rows, pending, built, next_claim)


async def _claim(d: "Dispatcher", conn: Conn) -> list[store.ClaimedRow]:
    if d.use_lock:
        await d.leader.ensure_held()
    delays = delay_table(d.options, d.rand)
    return await store.claim(conn, d.options.batch_size, delays, d.options.max_attempts)


async def build(rows: list[store.ClaimedRow], port: DomainPort) -> Built:
    """Typed events for a batch: one domain read per entity type, off the loop.

    If reading the domain fails (database trouble), every row gets that transient error
    and is retried after its backoff; the pass goes on.
    """
    if not rows:
        return []
    try:
        return await sync_to_async(_build_with_fresh_connection)(rows, port)
    except Exception as exc:
        logger.warning(
            "payload build failed", extra={"action": "build", "error": describe_error(exc)}
        )
        return [exc] * len(rows)


def _build_with_fresh_connection(rows: list[store.ClaimedRow], port: DomainPort) -> Built:
    close_old_connections()  # a long-lived worker must not reuse a broken connection
    return list(build_events(rows, port))


async def _record(
    d: "Dispatcher", conn: Conn, batch: Batch, pushed: Pushed, result: PassResult
) -> None:
    exhausted = [r for r in batch.rows if r.status == RealtimeOutboxStatus.QUARANTINED]
    outcomes = await store.record_outcomes(
        conn, pushed.done, pushed.failed, pushed.released, d.options.max_attempts
    )
    await report_batch(batch.rows, outcomes, exhausted, len(pushed.released), result, type(d))
