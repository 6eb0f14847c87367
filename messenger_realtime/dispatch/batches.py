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
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from django.db import close_old_connections

from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.contracts.build import build_events
from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.outcomes import PassResult, report
from messenger_realtime.dispatch.push import push
from messenger_realtime.dispatch.rows import Fate, RowOutcome
from messenger_realtime.exceptions import InvalidRow, describe_error
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field
from messenger_realtime.transport.publisher import Publisher

logger = logging.getLogger(__name__)

Conn = psycopg.AsyncConnection[Any]
Claim = Callable[[], Coroutine[Any, Any, list[RowOutcome]]]


@dataclass(frozen=True)
class PassContext:
    """What a pass needs from its worker: settings, seams, the stop flag, a claim that
    checks leadership first, and a heartbeat to call while it makes progress."""

    options: RealtimeDispatchOptions
    publisher: Publisher
    port: DomainPort
    stop: asyncio.Event
    claim: Claim
    beat: Callable[[], None]
    sender: Any  # the quarantine signal's sender


@dataclass
class Batch:
    outcomes: list[RowOutcome]  # one per claimed row, in id order
    next_claim: "asyncio.Task[list[RowOutcome]] | None"  # the batch after, if any


async def run_batches(ctx: PassContext, work_conn: Conn, result: PassResult) -> None:
    """Claim and dispatch batches while they come back full, up to MAX_RUN_DURATION."""
    if ctx.stop.is_set():
        return
    started = time.monotonic()
    spawned: set[asyncio.Task[Any]] = set()  # every stage task, settled before returning
    ahead: asyncio.Task[Batch] | None = _spawn(spawned, _build_after(ctx, None, started, spawned))
    recording: asyncio.Task[None] | None = None
    try:
        while ahead is not None:
            batch = await ahead
            ahead = None
            if not batch.outcomes:
                break
            result.batches += 1
            if batch.next_claim is not None:  # the next batch is being claimed already
                ahead = _spawn(spawned, _build_after(ctx, batch.next_claim, started, spawned))
            if ctx.stop.is_set():  # claimed ahead, then asked to stop: give the rows back
                for outcome in batch.outcomes:
                    if outcome.undecided:
                        outcome.decide(Fate.RELEASE)
            else:
                await push(batch.outcomes, ctx.publisher, ctx.stop, ctx.options.publish_timeout)
            if recording is not None:
                await recording  # outcomes are written and reported in batch order
            recording = _spawn(spawned, _record(ctx, work_conn, batch, result))
            ctx.beat()
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


def _spawn(spawned: set[asyncio.Task[Any]], work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    task = asyncio.create_task(work)
    spawned.add(task)
    return task


async def _build_after(
    ctx: PassContext,
    claiming: "asyncio.Task[list[RowOutcome]] | None",
    started: float,
    spawned: set[asyncio.Task[Any]],
) -> Batch:
    """Claim (or take the claim already running), start claiming the batch after it as
    soon as this one proves full, then build this one: claims run back to back, at most
    two batches ahead of the pushes, while builds and pushes catch up."""
    outcomes = await (claiming if claiming is not None else ctx.claim())
    if outcomes:
        logger.info("batch claimed", extra={"action": "claim", "rows": len(outcomes)})
    full = len(outcomes) == ctx.options.batch_size
    in_time = time.monotonic() - started < ctx.options.max_run_duration
    next_claim = None
    if full and in_time and not ctx.stop.is_set():
        next_claim = _spawn(spawned, ctx.claim())
    if not ctx.stop.is_set():  # rows about to be released need no build
        await build(outcomes, ctx.port)
        logger.debug("batch built", extra={"action": "build", "rows": len(outcomes)})
    return Batch(outcomes, next_claim)


async def build(outcomes: list[RowOutcome], port: DomainPort) -> None:
    """Give each undecided row its event, or decide it: one domain read per entity type,
    off the loop. An unbuildable row is quarantined (permanent); if reading the domain
    fails (database trouble) every row of the batch is retried after its backoff."""
    todo = [o for o in outcomes if o.undecided]
    if not todo:
        return
    try:
        with metrics.build_duration.time():
            built = await sync_to_async(_build_with_fresh_connection)(todo, port)
    except Exception as exc:
        error = describe_error(exc)
        logger.warning("payload build failed", extra={"action": "build", Field.ERROR_CODE: error})
        for outcome in todo:
            outcome.decide(Fate.RETRY, error)
        return
    for outcome, event in zip(todo, built, strict=True):
        if isinstance(event, InvalidRow):
            outcome.decide(Fate.QUARANTINE, str(event)[:512])
        else:
            outcome.event = event


def _build_with_fresh_connection(outcomes: list[RowOutcome], port: DomainPort) -> list[Any]:
    close_old_connections()  # a long-lived worker must not reuse a broken connection
    return build_events([o.row for o in outcomes], port)


async def _record(ctx: PassContext, conn: Conn, batch: Batch, result: PassResult) -> None:
    await store.record(conn, batch.outcomes, ctx.options.max_attempts)
    await report(batch.outcomes, result, ctx.sender)
