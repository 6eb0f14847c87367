"""`python manage.py reap_calls [--timeout S]`: the call-timeout reaper (CallMissed)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from project.messenger.services import reap_missed_calls


class Command(BaseCommand):
    help = "Mark 1:1 calls ringing longer than --timeout seconds as Missed (CallMissed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=45.0, help="ring timeout, seconds")

    def handle(self, *args: Any, timeout: float, **options: Any) -> None:
        if timeout < 0:
            raise CommandError("--timeout must be >= 0 seconds")
        self.stdout.write(f"missed calls: {reap_missed_calls(timeout)}")
