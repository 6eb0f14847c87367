"""Pushing a built batch: every undecided row ends Done, Retry or Release.

A BatchPublisher (the channel layer's pipelined path) gets the batch in chunks of
PIPELINE_CHUNK and a stop request is honoured between chunks; a plain Publisher gets one
row at a time and a stop is honoured between rows. Either way a push in flight finishes.

Backpressure: every connection of a hub process shares one queue in Redis, so an event
pushed behind a burst waits for the whole burst. After each chunk, while a hub process it
reached holds more than HUB_BACKLOG_LIMIT messages, the push waits (at most
HUB_BACKLOG_WAIT) so the backlog stays in PostgreSQL, where fair claims let other chats'
rows go first, instead of in the hub's queue. After a small push the first look is
answered by a bound when it can be (ChannelLayerPublisher.hub_backlog's `within`).
"""

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from messenger_realtime.backplane.publisher import (
    HubBacklog,
    Publisher,
    is_batch_publisher,
    reports_hub_backlog,
    transient,
)
from messenger_realtime.conf.settings import RealtimeDispatchOptions
from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.dispatch.rows import Fate, RowOutcome
from messenger_realtime.exceptions import InvalidRow, LeadershipLost, describe_error
from messenger_realtime.ops import metrics, tracing
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
PIPELINE_CHUNK = 100


@dataclass
class Pace:
    """Whether the pushes had to wait for a hub process to catch up (set as soon as one
    does). While they do, nothing is claimed ahead: rows claimed early would only queue
    behind the burst, where a quiet chat's newer row could no longer overtake them."""

    hub_behind: bool = False


class LayerTrouble:
    """Says in words why the channel layer cannot be reached, once per outage (and again
    when the cause changes, or every REPEAT seconds while it lasts): each row's retry line
    carries only the error's class and errno (`last_error` must hold no message text), so
    without this an operator reading "redis.exceptions.ConnectionError (code 111)" never
    learns which server refused. redis-py's text names the host and port, not a password.

    It is also the worker's readiness on the layer (ops/health.Liveness): failing while
    the last push failed (within `horizon` seconds: rows that failed are pushed again
    after their backoff, so a longer silence means nothing is left to try), ready again
    once a push passes.
    """

    REPEAT = 60.0

    def __init__(self) -> None:
        self.cause: str | None = None  # the last failed push's, until one passes
        self.failed_at = float("-inf")
        self.logged: str | None = None
        self.logged_at = float("-inf")

    def noted(self, exc: BaseException) -> None:
        text = str(exc).strip()
        cause = (text.splitlines()[0] if text else type(exc).__name__)[:300]
        now = time.monotonic()
        self.cause, self.failed_at = cause, now
        if cause != self.logged or now - self.logged_at >= self.REPEAT:
            logger.warning(
                "channel layer unreachable: %s",
                cause,
                extra={"action": "push", Field.ERROR_CODE: describe_error(exc)},
            )
            self.logged, self.logged_at = cause, now

    def cleared(self) -> None:
        if self.cause is not None:
            logger.info("channel layer reachable again", extra={"action": "push"})
            self.cause = self.logged = None

    def trouble(self, horizon: float) -> str | None:
        """Why pushes fail, if the last one failed within `horizon` seconds."""
        recent = time.monotonic() - self.failed_at <= horizon
        return self.cause if recent else None


LAYER = LayerTrouble()  # one per process: the layer is


async def push(
    outcomes: Sequence[RowOutcome],
    publisher: Publisher,
    stop: asyncio.Event,
    options: RealtimeDispatchOptions,
    guard: Callable[[], Coroutine[Any, Any, None]] | None = None,
    pace: Pace | None = None,
) -> None:
    """Push every built, undecided row in claim order and decide it; `pace` learns
    whether a hub process was behind (the push waited for it).

    `guard` runs before each chunk (the leader's lease check). When it raises
    LeadershipLost the push stops there: the rows pushed so far keep their decision (so
    their outcomes are still recorded), the rest stay undecided and keep their claim (the
    new leader retries them after the backoff), and the pass's next claim raises.
    """
    timeout = options.publish_timeout
    pace = pace or Pace()
    waited = False
    ready = [o for o in outcomes if o.undecided and o.event is not None]
    batched = is_batch_publisher(publisher)
    step = PIPELINE_CHUNK if batched else 1
    for start in range(0, len(ready), step):
        chunk = ready[start : start + step]
        if stop.is_set():  # graceful stop: between chunks (rows), never mid-push
            for outcome in chunk:
                outcome.decide(Fate.RELEASE)
            continue
        if guard is not None:
            try:
                await guard()
            except LeadershipLost:
                return
        events = [o.event for o in chunk if o.event is not None]
        with tracing.row_spans([o.row for o in chunk]):
            try:
                results = await asyncio.wait_for(_publish(publisher, events), timeout)
            except Exception as exc:
                _failed(chunk, exc)
                continue
        LAYER.cleared()
        for outcome, result in zip(chunk, results, strict=True):
            if result is None:
                outcome.decide(Fate.DONE)
            elif isinstance(result, InvalidRow):  # its own content: never deliverable
                outcome.decide(Fate.QUARANTINE, str(result)[:512])
            else:
                outcome.decide(Fate.RETRY, describe_error(result))
        if reports_hub_backlog(publisher) and await _wait_for_hub(publisher, options, stop, pace):
            waited = True
    pace.hub_behind = waited


def _failed(chunk: Sequence[RowOutcome], exc: BaseException) -> None:
    """A push that raised. Layer or Redis trouble is the chunk's: every row is retried.
    Anything else may be one row's doing, so none of its neighbours pays: each row of a
    chunk is retried alone, at once (as after a failed build); a row alone, after its
    backoff, as a suspect."""
    error = describe_error(exc)
    if transient(exc):
        LAYER.noted(exc)
        for outcome in chunk:
            outcome.decide(Fate.RETRY, error)
        return
    logger.warning(
        "push failed", extra={"action": "push", "rows": len(chunk), Field.ERROR_CODE: error}
    )
    for outcome in chunk:
        if len(chunk) > 1:
            outcome.decide(Fate.ISOLATE, error)
        else:
            outcome.suspect = True
            outcome.decide(Fate.RETRY, error)


async def _wait_for_hub(
    publisher: "HubBacklog", options: RealtimeDispatchOptions, stop: asyncio.Event, pace: Pace
) -> bool:
    """Wait while the hub processes just pushed to are too far behind (bounded); True
    when they were behind. `pace` learns it before the wait, so claims ahead stop now."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + options.hub_backlog_wait
    delay = 0.002
    try:
        waited = False
        # The first look may be answered by a bound (no round trip after a small push);
        # once behind, every look is a fresh measurement.
        limit = options.hub_backlog_limit
        while await publisher.hub_backlog(within=None if waited else limit) > limit:
            if stop.is_set() or loop.time() >= deadline:
                break
            waited = pace.hub_behind = True
            await asyncio.sleep(delay)  # the hub drains ~1-2k messages/s per process
            delay = min(delay * 2, 0.004)
        if waited:
            metrics.backpressure_waits.inc()
        return waited
    except Exception:  # measuring the backlog is best effort; the push itself succeeded
        logger.debug("hub backlog unknown", exc_info=True)
        return False


async def _publish(publisher: Publisher, events: list[OutgoingEvent]) -> list[BaseException | None]:
    if is_batch_publisher(publisher):
        return await publisher.publish_many(events)
    await publisher.publish(events[0])
    return [None]
