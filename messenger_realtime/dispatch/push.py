"""Pushing a built batch: every row gets done, failed (transient or permanent) or
released (not pushed because the worker is stopping).

Publishers with publish_many() (the channel layer's pipelined path) get the batch in
chunks of PIPELINE_CHUNK, and a stop request is honoured between chunks; others get one
row at a time, and a stop is honoured between rows. Either way a push in flight finishes.
"""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from messenger_realtime.contracts.events import InvalidRow, OutgoingEvent
from messenger_realtime.dispatch import store
from messenger_realtime.ops import tracing
from messenger_realtime.transport.publisher import Publisher, describe_error

logger = logging.getLogger("messenger_realtime.dispatch.dispatcher")
PIPELINE_CHUNK = 100


@dataclass
class Pushed:
    done: list[store.ClaimedRow] = field(default_factory=list)
    failed: list[store.Failure] = field(default_factory=list)
    released: list[store.ClaimedRow] = field(default_factory=list)

    def fail(self, row: store.ClaimedRow, exc: BaseException) -> None:
        error = describe_error(exc)
        self.failed.append(store.Failure(row, error))
        logger.warning(
            "dispatch retry",
            extra={
                "action": "retry",
                "EntryId": row.id,
                "Kind": row.kind,
                "Attempts": row.attempts,
                "errorCode": error,
            },
        )


async def push(
    rows: list[store.ClaimedRow],
    built: list[OutgoingEvent | InvalidRow | BaseException],
    publisher: Publisher,
    stop: asyncio.Event,
    timeout: float,
) -> Pushed:
    pushed = Pushed()
    ready: list[tuple[store.ClaimedRow, OutgoingEvent]] = []
    for row, event in zip(rows, built, strict=True):
        if isinstance(event, InvalidRow):
            pushed.failed.append(store.Failure(row, str(event)[:512], permanent=True))
        elif isinstance(event, BaseException):
            pushed.fail(row, event)
        else:
            ready.append((row, event))
    many = getattr(publisher, "publish_many", None)
    step = PIPELINE_CHUNK if many is not None else 1
    for start in range(0, len(ready), step):
        chunk = ready[start : start + step]
        if stop.is_set():  # graceful stop: between chunks (rows), never mid-push
            pushed.released += [row for row, _ in chunk]
            continue
        events = [event for _, event in chunk]
        with tracing.row_spans([row for row, _ in chunk]):
            try:
                work = many(events) if many is not None else _one(publisher, events[0])
                outcomes = await asyncio.wait_for(work, timeout)
            except Exception as exc:  # layer or Redis trouble: transient for the chunk
                outcomes = [exc] * len(chunk)
        for (row, _), outcome in zip(chunk, outcomes, strict=True):
            if outcome is None:
                pushed.done.append(row)
            else:
                pushed.fail(row, outcome)
    if pushed.done and logger.isEnabledFor(logging.DEBUG):
        for row in pushed.done:
            logger.debug(
                "dispatched",
                extra={
                    "action": "dispatched",
                    "Kind": row.kind,
                    "ChatId": row.chat_id,
                    "TargetUserId": row.target_user_id,
                    "Seq": row.seq,
                    "Attempts": row.attempts,
                },
            )
    return pushed


async def _one(publisher: Publisher, event: OutgoingEvent) -> list[Any]:
    await publisher.publish(event)
    return [None]
