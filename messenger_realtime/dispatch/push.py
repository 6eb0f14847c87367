"""Pushing a built batch: every undecided row ends Done, Retry or Release.

A BatchPublisher (the channel layer's pipelined path) gets the batch in chunks of
PIPELINE_CHUNK and a stop request is honoured between chunks; a plain Publisher gets one
row at a time and a stop is honoured between rows. Either way a push in flight finishes.
"""

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.dispatch.rows import Fate, RowOutcome
from messenger_realtime.exceptions import LeadershipLost, describe_error
from messenger_realtime.ops import tracing
from messenger_realtime.transport.publisher import BatchPublisher, Publisher

PIPELINE_CHUNK = 100


async def push(
    outcomes: Sequence[RowOutcome],
    publisher: Publisher,
    stop: asyncio.Event,
    timeout: float,
    guard: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Push every built, undecided row in claim order and decide it.

    `guard` runs before each chunk (the leader's lease check). When it raises
    LeadershipLost the push stops there: the rows pushed so far keep their decision (so
    their outcomes are still recorded), the rest stay undecided and keep their claim (the
    new leader retries them after the backoff), and the pass's next claim raises.
    """
    ready = [o for o in outcomes if o.undecided and o.event is not None]
    batched = isinstance(publisher, BatchPublisher)
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
            except Exception as exc:  # layer or Redis trouble: transient for the chunk
                for outcome in chunk:
                    outcome.decide(Fate.RETRY, describe_error(exc))
                continue
        for outcome, result in zip(chunk, results, strict=True):
            if result is None:
                outcome.decide(Fate.DONE)
            else:
                outcome.decide(Fate.RETRY, describe_error(result))


async def _publish(publisher: Publisher, events: list[OutgoingEvent]) -> list[BaseException | None]:
    if isinstance(publisher, BatchPublisher):
        return await publisher.publish_many(events)
    await publisher.publish(events[0])
    return [None]
