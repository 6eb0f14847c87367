"""What people do with the outbox (admin, ops command): list incidents, requeue, quarantine.

Requeue and quarantine update only rows in the eligible status, bumping row_version so
that an outcome the worker is about to write for an older claim cannot overwrite it.
"""

from collections.abc import Iterable
from typing import NamedTuple
from uuid import UUID

from django.db import transaction
from django.db.models import Count, F, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.models import RealtimeOutboxEntry
from messenger_realtime.outbox.notify import notify

# An incident's fingerprint: last_error with ids and numbers blanked, so one outage's
# rows group together.
FINGERPRINT_SQL = (
    "regexp_replace(coalesce(last_error, ''), "
    "'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9]+', '#', 'g')"
)
MANUAL_QUARANTINE = "ManualQuarantine: set aside by an operator"


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


def requeue(ids: Iterable[UUID], using: str = "default") -> int:
    """Quarantined -> Pending, attempts 0, due now (nothing else changes); wakes the worker.

    Args:
        ids: the rows to requeue; those not Quarantined (any more) are left alone.
        using: the database alias to write to.

    Returns:
        How many rows were requeued.

    Raises:
        django.db.DatabaseError: the UPDATE or the NOTIFY failed; nothing changed.
    """
    with transaction.atomic(using=using):
        count = (
            RealtimeOutboxEntry.objects.using(using)
            .filter(id__in=list(ids), status=Status.QUARANTINED)
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
    return count


def quarantine(ids: Iterable[UUID], using: str = "default") -> int:
    """Pending -> Quarantined (kept, never dropped); last_error says who, if it was empty.

    Args:
        ids: the rows to set aside; those not Pending (any more) are left alone.
        using: the database alias to write to.

    Returns:
        How many rows were quarantined.

    Raises:
        django.db.DatabaseError: an UPDATE failed; nothing changed.
    """
    rows = RealtimeOutboxEntry.objects.using(using).filter(id__in=list(ids), status=Status.PENDING)
    with transaction.atomic(using=using):
        blank = rows.filter(last_error__isnull=True).update(
            status=Status.QUARANTINED,
            last_error=MANUAL_QUARANTINE,
            claimed_at=None,
            updated_at=Now(),
            row_version=F("row_version") + 1,
        )
        rest = rows.update(
            status=Status.QUARANTINED,
            claimed_at=None,
            updated_at=Now(),
            row_version=F("row_version") + 1,
        )
    return blank + rest
