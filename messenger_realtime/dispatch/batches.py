"""One dispatch pass: a pipeline of overlapping fair batches, then suspects one by one.

Suspects (rows whose last attempt never got an outcome: the worker died or hung on them)
are claimed, built, pushed and recorded one at a time, after the batches, so a row that
kills the worker takes only itself to MAX_ATTEMPTS and every restart delivers the other
rows first. The batches:

Claims run back to back on the claim connection, each starting as soon as the one before
proves full; each claimed batch is built (the domain read, off the event loop) while the
one before is pushed; batch N's outcomes are written (the work connection) while batch
N+1 is pushed. At most two batches are claimed ahead of the pushes. The spec's semantics
hold batch by batch: a claim commits before any of its rows is pushed, pushes run outside
transactions and in claim order, every row gets its own outcome, and outcomes are written
and reported in batch order, at most one batch behind the pushes.
"""

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import psycopg

from messenger_realtime.backplane.publisher import Publisher
from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.dispatch import store
from messenger_realtime.dispatch.build_thread import Builder
from messenger_realtime.dispatch.claimer import Claimer
from messenger_realtime.dispatch.outcomes import PassResult, report
from messenger_realtime.dispatch.push import Pace, push
from messenger_realtime.dispatch.rows import Fate, RowOutcome
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)

# The suspects' own time per pass, as a share of MAX_RUN_DURATION (1.25 s by default):
# after a crash a backlog of suspects gets a fifth of the worker's time while a fair
# backlog takes the rest, and all of it once the fair backlog has drained.
SUSPECT_SHARE = 0.25

Conn = psycopg.AsyncConnection[Any]
Guard = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class PassContext:
    """What a pass needs from its worker: settings, seams, the stop flag, the claimer
    (a fair batch; one suspect: each proves the lease), a heartbeat to call while it makes
    progress, and a guard each push awaits first (raises LeadershipLost once the lease is
    gone)."""

    options: RealtimeDispatchOptions
    publisher: Publisher
    builder: Builder
    stop: asyncio.Event
    claimer: Claimer
    beat: Callable[[], None]
    sender: Any  # the quarantine signal's sender
    guard: Guard | None = None
    suspects_due: Callable[[int], bool] | None = None  # given the pass's retried count


@dataclass
class Batch:
    outcomes: list[RowOutcome]  # one per claimed row, in id order
    next_claim: "asyncio.Task[list[RowOutcome]] | None"  # the batch after, if any
    full: bool  # as many rows as BATCH_SIZE: more may be due


async def run_pass(ctx: PassContext, work_conn: Conn, result: PassResult) -> None:
    """Batches while they come back full, up to MAX_RUN_DURATION, then suspects alone
    (when due: wakes.py) for their own share of it."""
    started = time.monotonic()
    await run_batches(ctx, work_conn, result, started)
    if ctx.suspects_due is None or ctx.suspects_due(result.retried):
        await run_suspects(ctx, work_conn, result)


async def run_suspects(ctx: PassContext, work_conn: Conn, result: PassResult) -> None:
    """Each due suspect on its own: claim one, build it, push it, record it; next.

    Suspects have a budget of their own, SUSPECT_SHARE of MAX_RUN_DURATION from their
    first claim (at least one suspect), whatever the batches before them took: they
    used to get only what was left of the pass's time, one suspect per pass behind a
    backlog. A budget that runs out leaves `suspects_left` set, and the next pass follows
    at once and probes again (wakes.py), so N suspects drain in about N alone-trips
    however long the fair backlog beside them is."""
    started = time.monotonic()
    budget = ctx.options.max_run_duration * SUSPECT_SHARE
    first = True
    while not ctx.stop.is_set():
        if not first and time.monotonic() - started >= budget:
            result.suspects_left = True  # maybe: the next pass's probe finds out
            return
        first = False
        outcomes = await ctx.claimer.suspect()
        if not outcomes:
            return
        logger.info("suspect claimed alone", extra={"action": "suspect", "rows": 1})
        await ctx.builder.build(outcomes)
        await push(outcomes, ctx.publisher, ctx.stop, ctx.options, ctx.guard)
        await store.record(work_conn, outcomes, ctx.options.max_attempts)
        await report(outcomes, result, ctx.sender, ctx.options.dispatched_log_sample)
        ctx.beat()


async def run_batches(
    ctx: PassContext, work_conn: Conn, result: PassResult, started: float
) -> None:
    """Claim and dispatch batches while they come back full, up to MAX_RUN_DURATION."""
    if ctx.stop.is_set():
        return
    spawned: set[asyncio.Task[Any]] = set()  # every stage task, settled before returning
    pace = Pace()
    first = _build_after(ctx, None, started, spawned, pace)
    ahead: asyncio.Task[Batch] | None = _spawn(spawned, first)
    recording: asyncio.Task[None] | None = None
    try:
        while ahead is not None:
            batch = await ahead
            ahead = None
            result.more_due = batch.full  # the pass may end here with more rows due
            if not batch.outcomes:
                break
            result.batches += 1
            result.claimed += len(batch.outcomes)
            if batch.next_claim is not None:  # the next batch is being claimed already
                after = _build_after(ctx, batch.next_claim, started, spawned, pace)
                ahead = _spawn(spawned, after)
            if ctx.stop.is_set():  # claimed ahead, then asked to stop: give the rows back
                for outcome in batch.outcomes:
                    if outcome.undecided:
                        outcome.decide(Fate.RELEASE)
            else:
                await push(batch.outcomes, ctx.publisher, ctx.stop, ctx.options, ctx.guard, pace)
                if ahead is None and batch.full and _in_time(ctx, started):
                    # The hub held the pushes back: claim the next batch only now.
                    ahead = _spawn(spawned, _build_after(ctx, None, started, spawned, pace))
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
    pace: Pace,
) -> Batch:
    """Claim (or take the claim already running), start claiming the batch after it as
    soon as this one proves full, then build this one: claims run back to back, at most
    two batches ahead of the pushes, while builds and pushes catch up."""
    outcomes = await (claiming if claiming is not None else ctx.claimer.fair())
    if outcomes:
        logger.info("batch claimed", extra={"action": "claim", Field.ROWS: len(outcomes)})
    full = len(outcomes) == ctx.options.batch_size
    next_claim = None
    if full and _in_time(ctx, started) and not pace.hub_behind:
        next_claim = _spawn(spawned, ctx.claimer.fair())
    if not ctx.stop.is_set():  # rows about to be released need no build
        await ctx.builder.build(outcomes)
        logger.debug("batch built", extra={"action": "build", "rows": len(outcomes)})
    return Batch(outcomes, next_claim, full)


def _in_time(ctx: PassContext, started: float) -> bool:
    """The pass may claim another batch: not stopping, MAX_RUN_DURATION not reached."""
    elapsed = time.monotonic() - started
    return not ctx.stop.is_set() and elapsed < ctx.options.max_run_duration


async def _record(ctx: PassContext, conn: Conn, batch: Batch, result: PassResult) -> None:
    await store.record(conn, batch.outcomes, ctx.options.max_attempts)
    await report(batch.outcomes, result, ctx.sender, ctx.options.dispatched_log_sample)
