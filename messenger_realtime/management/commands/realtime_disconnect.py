"""`python manage.py realtime_disconnect USER_ID`: make a user's hub connections reconnect."""

from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from messenger_realtime.backplane.control import disconnect_user


class Command(BaseCommand):
    help = (
        "Close every open hub connection of USER_ID with allowReconnect: the clients "
        "reconnect, are authenticated again and get their groups rebuilt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user_id", help="the user's UUID")

    def handle(self, *args: Any, user_id: str, **options: Any) -> None:
        try:
            subject = UUID(user_id)
        except ValueError as exc:
            raise CommandError(f"not a user id (UUID): {user_id!r}") from exc
        disconnect_user(subject)
        self.stdout.write(f"asked the connections of user {subject} to reconnect")
