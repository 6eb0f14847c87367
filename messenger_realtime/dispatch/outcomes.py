"""What a batch's recorded outcomes tell the outside: pass counters, logs, metrics, alerts.

Runs only after the outcome transaction committed, and reads only what the database
kept (RowOutcome.recorded), so nothing is reported that did not happen: a retry that
turned into a quarantine is reported as the quarantine, a stale outcome as neither.

The spec's lines: `dispatched` (INFO, one per Done row, on its own logger so it can be
lowered, and sampled by DISPATCHED_LOG_SAMPLE), `dispatch retry` (WARNING) and
`quarantined` (ERROR). Fields are ids and counts only (ops.logging.Field), never a body.
"""

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from messenger_realtime.dispatch.rows import Fate, RowOutcome
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.signals import (
    RealtimeDispatchQuarantinedEvent,
    realtime_dispatch_quarantined,
)

logger = get_logger(__name__)
# Its own logger: under load an operator can lower it (LOG_LEVELS or LOGGING) without
# losing the retry and quarantine lines.
dispatched_logger = get_logger(f"{__name__}.dispatched")


@dataclass
class PassResult:
    """Counts of one pass, as the spec's `job completed` line reports them."""

    dispatched: int = 0
    retried: int = 0
    quarantined: int = 0
    released: int = 0
    expired: int = 0
    stale: int = 0
    batches: int = 0
    claimed: int = 0  # rows the pass's batches claimed
    more_due: bool = False  # its last batch came back full (MAX_RUN_DURATION ended it)
    suspects_left: bool = False  # its suspects' budget ran out with suspects still due
    duration_ms: float = 0.0

    def log_fields(self) -> dict[str, Any]:
        """The counts the spec's `job completed` line names."""
        return {
            Field.DISPATCHED: self.dispatched,
            Field.RETRIED: self.retried,
            Field.QUARANTINED: self.quarantined,
            Field.DURATION_MS: self.duration_ms,
        }


async def report(
    outcomes: Sequence[RowOutcome], result: PassResult, sender: Any, sample: float = 1.0
) -> None:
    """Count, log, measure and signal one recorded batch; `sample` is the share of
    Done rows that get a `dispatched` line (DISPATCHED_LOG_SAMPLE)."""
    done = [o for o in outcomes if o.fate is Fate.DONE and o.recorded is Status.DONE]
    expired = [o for o in outcomes if o.fate is Fate.EXPIRE and o.recorded is Status.DONE]
    retried = [
        o for o in outcomes if o.fate in (Fate.RETRY, Fate.ISOLATE) and o.recorded is Status.PENDING
    ]
    quarantined = [o for o in outcomes if o.recorded is Status.QUARANTINED]
    released = [o for o in outcomes if o.fate is Fate.RELEASE and o.recorded is not None]
    stale = sum(o.fate is not None and o.recorded is None for o in outcomes)
    # One increment per kind and batch, not per row: this runs on the hot path.
    for kind, count in Counter(o.row.kind for o in done).items():
        metrics.dispatched.labels(kind=kind).inc(count)
    for outcome in done:
        metrics.lag.observe(outcome.lag or 0.0)
    for kind, count in Counter(o.row.kind for o in retried).items():
        metrics.retried.labels(kind=kind).inc(count)
    for outcome in expired:
        metrics.expired.labels(kind=outcome.row.kind).inc()
        logger.info("expired", extra={"action": "expired", **_fields(outcome)})
    result.dispatched += len(done)
    result.expired += len(expired)
    result.retried += len(retried)
    result.released += len(released)
    result.stale += stale
    if done and sample > 0 and dispatched_logger.isEnabledFor(logging.INFO):
        extra: dict[str, Any] = {"action": "dispatched"}
        if sample < 1:
            extra["sample"] = sample  # a reader multiplies counts by 1/sample
        for outcome in done:
            if sample >= 1 or random.random() < sample:  # sampling, not security
                dispatched_logger.info("dispatched", extra=extra | _fields(outcome))
    for outcome in retried:
        logger.warning("dispatch retry", extra={"action": "retry", **_fields(outcome)})
    if stale:
        logger.warning(
            "outcomes skipped: rows changed after their claim",
            extra={"action": "stale", "rows": stale},
        )
    result.quarantined += len(quarantined)
    for outcome in quarantined:
        row = outcome.row
        metrics.quarantined.labels(kind=row.kind).inc()
        logger.error("quarantined", extra={"action": "quarantined", **_fields(outcome)})
        alert = RealtimeDispatchQuarantinedEvent(row.id, row.kind, row.chat_id, row.attempts)
        await realtime_dispatch_quarantined.asend(sender=sender, event=alert)


def _fields(outcome: RowOutcome) -> dict[str, Any]:
    """The spec's log fields of a row (ids and counts only: never a body)."""
    row = outcome.row
    fields: dict[str, Any] = {
        Field.ENTRY_ID: row.id,
        Field.KIND: row.kind,
        Field.ATTEMPTS: row.attempts,
    }
    if row.chat_id is not None:
        fields[Field.CHAT_ID] = row.chat_id
    if row.target_user_id is not None:
        fields[Field.TARGET_USER_ID] = row.target_user_id
    if row.seq is not None:
        fields[Field.SEQ] = row.seq
    if outcome.error is not None and outcome.fate is not Fate.DONE:
        fields[Field.ERROR_CODE] = outcome.error
    return fields
