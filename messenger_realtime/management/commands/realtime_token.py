"""`python manage.py realtime_token USER_ID`: print a hub access token (JWT) for a user."""

from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.auth import mint_access_token


class Command(BaseCommand):
    help = "Print an HS256 access token for USER_ID, signed with the configured JWT_SIGNING_KEY."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user_id", help="the user's UUID (the token's subject)")
        parser.add_argument(
            "--lifetime", type=float, default=None, help="seconds (default: JWT_LIFETIME)"
        )

    def handle(self, *args: Any, user_id: str, lifetime: float | None, **options: Any) -> None:
        try:
            subject = UUID(user_id)
        except ValueError as exc:
            raise CommandError(f"not a user id (UUID): {user_id!r}") from exc
        hub = load_hub_options()
        if lifetime is not None and not 0 < lifetime <= hub.jwt_max_lifetime:
            raise CommandError(
                f"--lifetime must be > 0 and at most JWT_MAX_LIFETIME "
                f"({hub.jwt_max_lifetime:g} seconds): the hub refuses longer tokens"
            )
        # System checks (run before handle) refuse a missing or short JWT_SIGNING_KEY, so
        # the token is always signed with the key the hub verifies with.
        self.stdout.write(mint_access_token(subject, hub, lifetime))
