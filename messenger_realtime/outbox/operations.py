"""State changes made by people (admin, ops commands): requeue and quarantine.

Each is one UPDATE filtered to the eligible status, bumping row_version so that an
outcome the worker is about to write for an older claim cannot overwrite it.
"""

import re
from collections.abc import Iterable
from uuid import UUID

from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.models import RealtimeOutboxEntry
from messenger_realtime.outbox.notify import notify

# An incident's fingerprint: last_error with ids and numbers blanked, so one outage's
# rows group together. fingerprint() below is the same rule in Python.
FINGERPRINT_SQL = (
    "regexp_replace(coalesce(last_error, ''), "
    "'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9]+', '#', 'g')"
)
_FINGERPRINT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9]+")
MANUAL_QUARANTINE = "ManualQuarantine: set aside by an operator"


def fingerprint(last_error: str | None) -> str:
    return _FINGERPRINT.sub("#", last_error or "")


def with_fingerprint(rows: QuerySet[RealtimeOutboxEntry]) -> QuerySet[RealtimeOutboxEntry]:
    return rows.annotate(fingerprint=RawSQL(FINGERPRINT_SQL, []))


def requeue(ids: Iterable[UUID], using: str = "default") -> int:
    """Quarantined -> Pending, attempts 0, due now (nothing else changes); wakes the worker."""
    with transaction.atomic(using=using):
        count = (
            RealtimeOutboxEntry.objects.using(using)
            .filter(id__in=list(ids), status=Status.QUARANTINED)
            .update(
                status=Status.PENDING,
                attempts=0,
                next_attempt_at=Now(),
                updated_at=Now(),
                row_version=F("row_version") + 1,
            )
        )
        if count:
            notify(using)
    return count


def quarantine(ids: Iterable[UUID], using: str = "default") -> int:
    """Pending -> Quarantined (kept, never dropped); last_error says who, if it was empty."""
    rows = RealtimeOutboxEntry.objects.using(using).filter(id__in=list(ids), status=Status.PENDING)
    with transaction.atomic(using=using):
        blank = rows.filter(last_error__isnull=True).update(
            status=Status.QUARANTINED,
            last_error=MANUAL_QUARANTINE,
            updated_at=Now(),
            row_version=F("row_version") + 1,
        )
        rest = rows.update(
            status=Status.QUARANTINED, updated_at=Now(), row_version=F("row_version") + 1
        )
    return blank + rest
