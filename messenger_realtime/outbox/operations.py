"""What people do with the outbox (admin, ops command): list incidents, requeue, quarantine.

Requeue and quarantine update only rows in the eligible status, bumping row_version so
that an outcome the worker is about to write for an older claim cannot overwrite it. They
work in batches of BATCH_SIZE rows, each its own short transaction, so that a post-outage
requeue of thousands of rows never holds thousands of row locks (or one huge statement)
while the worker runs; every batch that changed rows wakes the worker.
"""

from collections.abc import Iterable, Iterator
from typing import NamedTuple
from uuid import UUID

from django.db import transaction
from django.db.models import CharField, Count, F, Q, QuerySet, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Concat, Left, Now

from messenger_realtime.exceptions import INVALID_ROW_CODES
from messenger_realtime.ops.logging import get_logger
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.models import RealtimeOutboxEntry
from messenger_realtime.outbox.notify import notify

logger = get_logger(__name__)

# An incident's fingerprint: last_error with ids and numbers blanked, so one outage's
# rows group together.
FINGERPRINT_SQL = (
    "regexp_replace(coalesce(last_error, ''), "
    "'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9]+', '#', 'g')"
)
MANUAL_QUARANTINE = "ManualQuarantine: set aside by {operator}"
BATCH_SIZE = 500  # rows per UPDATE (and transaction)
# The codes of errors the dispatcher quarantines at the first attempt because the row can
# never be built as it is (messenger_realtime.exceptions.InvalidRow): requeueing such a
# row only quarantines it again (runbook: Quarantined rows, step 2).
PERMANENT_ERRORS = INVALID_ROW_CODES


def manual_quarantine_error(operator: str) -> str:
    """The last_error of a row an operator set aside (names who did it)."""
    return MANUAL_QUARANTINE.format(operator=operator)[:512]


def permanent(rows: QuerySet[RealtimeOutboxEntry]) -> QuerySet[RealtimeOutboxEntry]:
    """The rows whose last_error is a permanent build error."""
    match = Q()
    for code in PERMANENT_ERRORS:
        match |= Q(last_error__startswith=f"{code}: ")
    return rows.filter(match)


def _batches(ids: Iterable[UUID], size: int) -> Iterator[list[UUID]]:
    batch: list[UUID] = []
    for row_id in ids:
        batch.append(row_id)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class Incident(NamedTuple):
    """One fingerprint and how many Quarantined rows carry it."""

    fingerprint: str
    rows: int


def with_fingerprint(rows: QuerySet[RealtimeOutboxEntry]) -> QuerySet[RealtimeOutboxEntry]:
    """The rows annotated with `fingerprint`, to filter or group by it."""
    return rows.annotate(fingerprint=RawSQL(FINGERPRINT_SQL, []))


def incidents(limit: int | None = None, using: str = "default") -> list[Incident]:
    """Quarantined rows grouped by fingerprint, the largest group first.

    Args:
        limit: at most this many groups (the largest); None for all of them.
        using: the database alias to read from.

    Returns:
        One Incident per fingerprint; "" is the fingerprint of rows without last_error.

    Raises:
        django.db.DatabaseError: the query failed.
    """
    quarantined = RealtimeOutboxEntry.objects.using(using).filter(status=Status.QUARANTINED)
    groups = (
        with_fingerprint(quarantined)
        .values_list("fingerprint")  # type: ignore[misc]
        .annotate(rows=Count("id"))
        .order_by("-rows")
    )
    return [Incident(*group) for group in groups[:limit]]


def requeue(
    ids: Iterable[UUID], using: str = "default", batch_size: int = BATCH_SIZE, operator: str = ""
) -> int:
    """Quarantined -> Pending, attempts 0, due now (nothing else changes); wakes the worker.

    Args:
        ids: the rows to requeue; those not Quarantined (any more) are left alone.
        using: the database alias to write to.
        batch_size: rows per UPDATE, each in its own transaction.
        operator: who asked (logged).

    Returns:
        How many rows were requeued.

    Raises:
        django.db.DatabaseError: an UPDATE or NOTIFY failed; earlier batches stay requeued.
    """
    total = 0
    for batch in _batches(ids, batch_size):
        with transaction.atomic(using=using):
            count = (
                RealtimeOutboxEntry.objects.using(using)
                .filter(id__in=batch, status=Status.QUARANTINED)
                .update(
                    status=Status.PENDING,
                    attempts=0,
                    next_attempt_at=Now(),
                    claimed_at=None,  # a fresh start: not a suspect any more
                    updated_at=Now(),
                    row_version=F("row_version") + 1,
                )
            )
            if count:
                notify(using)
        total += count
    logger.info("requeued", extra={"action": "requeue", "rows": total, "operator": operator})
    return total


def quarantine(
    ids: Iterable[UUID],
    using: str = "default",
    batch_size: int = BATCH_SIZE,
    operator: str = "an operator",
) -> int:
    """Pending -> Quarantined (kept, never dropped); last_error names the operator, and
    keeps the row's previous error after it.

    Args:
        ids: the rows to set aside; those not Pending (any more) are left alone.
        using: the database alias to write to.
        batch_size: rows per UPDATE, each in its own transaction.
        operator: who set them aside (written into last_error and logged).

    Returns:
        How many rows were quarantined.

    Raises:
        django.db.DatabaseError: an UPDATE failed; earlier batches stay quarantined.
    """
    reason = manual_quarantine_error(operator)
    total = 0
    for batch in _batches(ids, batch_size):
        rows = RealtimeOutboxEntry.objects.using(using).filter(id__in=batch, status=Status.PENDING)
        with transaction.atomic(using=using):
            total += rows.filter(last_error__isnull=True).update(
                status=Status.QUARANTINED,
                last_error=reason,
                claimed_at=None,
                updated_at=Now(),
                row_version=F("row_version") + 1,
            )
            was = Concat(Value(f"{reason}; was: "), F("last_error"), output_field=CharField())
            total += rows.update(
                status=Status.QUARANTINED,
                last_error=Left(was, 512),
                claimed_at=None,
                updated_at=Now(),
                row_version=F("row_version") + 1,
            )
    logger.info(
        "quarantined by an operator",
        extra={"action": "quarantine", "rows": total, "operator": operator},
    )
    return total
