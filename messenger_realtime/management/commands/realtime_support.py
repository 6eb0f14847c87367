"""`python manage.py realtime_support grant|revoke USERNAME... | list`: who may review and
requeue quarantined outbox rows in the admin (the "Realtime support" group)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from messenger_realtime.outbox import support


class Command(BaseCommand):
    help = (
        f"grant: put users in the {support.SUPPORT_GROUP!r} group and give them Staff status "
        "(they then see the realtime outbox in the admin, and may requeue and quarantine "
        "rows; nothing else). revoke: take them out of it (Staff status stays). list: its "
        "members."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("operation", choices=["grant", "revoke", "list"])
        parser.add_argument("usernames", nargs="*", metavar="USERNAME")

    def handle(self, *args: Any, operation: str, usernames: list[str], **opts: Any) -> None:
        try:
            if operation == "list":
                if usernames:
                    raise CommandError("list takes no USERNAME")
                for name in support.members():
                    self.stdout.write(name)
                return
            if not usernames:
                raise CommandError(f"{operation} needs at least one USERNAME")
            change = support.grant if operation == "grant" else support.revoke
            for name in usernames:
                done = change(name)
                self.stdout.write(self._said(operation, done))
        except support.SupportAccessError as exc:
            raise CommandError(str(exc)) from exc

    @staticmethod
    def _said(operation: str, done: support.Change) -> str:
        group = support.SUPPORT_GROUP
        if operation == "grant":
            if not done.changed:
                return f"{done.username} is already in {group!r} (and staff)"
            return f"{done.username} is now in {group!r} and staff: the admin shows them the outbox"
        if not done.changed:
            return f"{done.username} was not in {group!r}"
        return f"{done.username} is no longer in {group!r} (Staff status unchanged)"
