"""What a batch's outcomes tell the outside: pass counters, logs, metrics, alerts.

Called only after the outcome transaction has committed, so nothing is reported that
did not happen.
"""

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from messenger_realtime.dispatch import store
from messenger_realtime.ops import metrics
from messenger_realtime.outbox.signals import (
    RealtimeDispatchQuarantinedEvent,
    realtime_dispatch_quarantined,
)

logger = logging.getLogger("messenger_realtime.dispatch.dispatcher")


@dataclass
class PassResult:
    dispatched: int = 0
    retried: int = 0
    quarantined: int = 0
    released: int = 0
    stale: int = 0
    batches: int = 0
    duration_ms: float = 0.0


async def report_batch(
    rows: list[store.ClaimedRow],
    outcomes: store.Outcomes,
    exhausted: list[store.ClaimedRow],
    released: int,
    result: PassResult,
    sender: Any,
) -> None:
    kinds = {row.id: row.kind for row in rows}
    # One increment per kind and batch, not per row: this runs on the hot path.
    for kind, count in Counter(kinds[row_id] for row_id, _lag in outcomes.done).items():
        metrics.dispatched.labels(kind=kind).inc(count)
    for _row_id, lag in outcomes.done:
        metrics.lag.observe(lag)
    for kind, count in Counter(kinds[row_id] for row_id in outcomes.retried).items():
        metrics.retried.labels(kind=kind).inc(count)
    result.dispatched += len(outcomes.done)
    result.retried += len(outcomes.retried)
    result.released += released
    result.stale += outcomes.stale
    if outcomes.stale:
        logger.warning(
            "outcomes skipped: rows changed after their claim",
            extra={"action": "stale", "rows": outcomes.stale},
        )
    quarantined = [(r.id, r.kind, r.chat_id, r.attempts) for r in exhausted]
    quarantined += outcomes.quarantined
    result.quarantined += len(quarantined)
    for entry_id, kind, chat_id, attempts in quarantined:
        metrics.quarantined.labels(kind=kind).inc()
        logger.error(
            "quarantined",
            extra={
                "action": "quarantined",
                "EntryId": entry_id,
                "Kind": kind,
                "Attempts": attempts,
            },
        )
        alert = RealtimeDispatchQuarantinedEvent(entry_id, kind, chat_id, attempts)
        await realtime_dispatch_quarantined.asend(sender=sender, event=alert)
