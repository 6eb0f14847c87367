"""`python manage.py finalize_recording ID (--url URL | --failed CODE)`: the media
server's verdict on a recording (RecordingAvailable / RecordingFailed)."""

from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from project.messenger.services import DomainError, finalize_recording


class Command(BaseCommand):
    help = "Record that a recording is available at URL, or failed with CODE."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("recording_id")
        verdict = parser.add_mutually_exclusive_group(required=True)
        verdict.add_argument("--url", default="")
        verdict.add_argument("--failed", default="", metavar="CODE")

    def handle(self, *args: Any, recording_id: str, url: str, failed: str, **kw: Any) -> None:
        try:
            recording = finalize_recording(UUID(recording_id), file_url=url, failure_code=failed)
        except ValueError as exc:
            raise CommandError(f"not a recording id: {recording_id!r}") from exc
        except DomainError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"recording {recording.id}: {recording.status}")
