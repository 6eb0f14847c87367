"""`python manage.py realtime_outbox incidents|requeue|quarantine [filters]`: the admin's
operations for ops without the admin."""

import getpass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from messenger_realtime.outbox import operations as services
from messenger_realtime.outbox.enums import RealtimeDispatchKind
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from messenger_realtime.outbox.models import RealtimeOutboxEntry


class Command(BaseCommand):
    help = (
        "incidents: quarantined rows grouped by error fingerprint. requeue: Quarantined -> "
        "Pending (attempts 0, due now). quarantine: Pending -> Quarantined. requeue and "
        "quarantine need at least one filter: --ids, --kind, --fingerprint, --since."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("operation", choices=["incidents", "requeue", "quarantine"])
        parser.add_argument("--ids", nargs="+", default=[], help="row ids")
        parser.add_argument("--kind", choices=RealtimeDispatchKind.values)
        parser.add_argument("--fingerprint", help="an incident, as `incidents` prints it")
        parser.add_argument("--since", help="rows created at or after this ISO 8601 time")
        parser.add_argument("--dry-run", action="store_true", help="count, change nothing")

    def handle(self, *args: Any, operation: str, **opts: Any) -> None:
        if operation == "incidents":
            for incident in services.incidents():
                self.stdout.write(f"{incident.rows:>8}  {incident.fingerprint or '(none)'}")
            return
        eligible = Status.QUARANTINED if operation == "requeue" else Status.PENDING
        rows = self._filtered(RealtimeOutboxEntry.objects.filter(status=eligible), opts)
        ids = list(rows.values_list("id", flat=True))
        if opts["dry_run"]:
            self.stdout.write(f"would {operation} {len(ids)} rows")
            return
        operator = f"{getpass.getuser()} (manage.py realtime_outbox)"
        change = services.requeue if operation == "requeue" else services.quarantine
        changed = change(ids, operator=operator)
        self.stdout.write(f"{operation}d {changed} rows (of {len(ids)} matching)")

    def _filtered(
        self, rows: QuerySet[RealtimeOutboxEntry], opts: dict[str, Any]
    ) -> QuerySet[RealtimeOutboxEntry]:
        if not (opts["ids"] or opts["kind"] or opts["fingerprint"] is not None or opts["since"]):
            raise CommandError("give at least one filter: --ids, --kind, --fingerprint, --since")
        if opts["ids"]:
            try:
                rows = rows.filter(id__in=[UUID(i) for i in opts["ids"]])
            except ValueError as exc:
                raise CommandError("--ids takes row ids (UUIDs)") from exc
        if opts["kind"]:
            rows = rows.filter(kind=opts["kind"])
        if opts["fingerprint"] is not None:
            rows = services.with_fingerprint(rows).filter(fingerprint=opts["fingerprint"])  # type: ignore[misc]
        if opts["since"]:
            try:
                since = datetime.fromisoformat(opts["since"])
            except ValueError as exc:
                raise CommandError("--since takes an ISO 8601 time") from exc
            if since.tzinfo is None:
                raise CommandError("--since needs a time zone, e.g. 2026-11-30T07:00:00+00:00")
            rows = rows.filter(created_at__gte=since)
        return rows
