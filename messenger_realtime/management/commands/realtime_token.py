"""`python manage.py realtime_token USER_ID | --username NAME`: print a hub access token
(JWT) for a user."""

from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.credentials.tokens import mint_access_token

SUGGESTIONS = 5  # similar names shown for an unknown one (a bounded query)


class Command(BaseCommand):
    help = (
        "Print an HS256 access token for USER_ID (or the user named by --username), signed "
        "with the configured JWT_SIGNING_KEY."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("user_id", nargs="?", help="the user's UUID (the token's subject)")
        who.add_argument(
            "--username",
            help="the user's login name (AUTH_USER_MODEL's USERNAME_FIELD), instead of USER_ID",
        )
        parser.add_argument(
            "--lifetime", type=float, default=None, help="seconds (default: JWT_LIFETIME)"
        )

    def handle(
        self,
        *args: Any,
        user_id: str | None,
        username: str | None,
        lifetime: float | None,
        **options: Any,
    ) -> None:
        subject = user_named(username) if username is not None else parse_user_id(user_id)
        hub = load_hub_options()
        if lifetime is not None and not 0 < lifetime <= hub.jwt_max_lifetime:
            raise CommandError(
                f"--lifetime must be > 0 and at most JWT_MAX_LIFETIME "
                f"({hub.jwt_max_lifetime:g} seconds): the hub refuses longer tokens"
            )
        # System checks (run before handle) refuse a missing or short JWT_SIGNING_KEY, so
        # the token is always signed with the key the hub verifies with.
        self.stdout.write(mint_access_token(subject, hub, lifetime))


def parse_user_id(user_id: str | None) -> UUID:
    try:
        return UUID(str(user_id))
    except ValueError as exc:
        raise CommandError(f"not a user id (UUID): {user_id!r}") from exc


def user_named(username: str) -> UUID:
    """The id of the user whose USERNAME_FIELD is `username`; an error that names the
    field and a few similar names when there is none. (The system checks already
    require a UUID primary key of AUTH_USER_MODEL.)"""
    model = get_user_model()
    field = model.USERNAME_FIELD
    found = model._default_manager.filter(**{field: username}).values_list("pk", flat=True)
    for pk in found[:1]:
        return UUID(str(pk))
    similar = model._default_manager.filter(**{f"{field}__icontains": username})
    names = list(similar.order_by(field).values_list(field, flat=True)[:SUGGESTIONS])
    hint = f"; similar: {', '.join(map(str, names))}" if names else ""
    raise CommandError(f"no user with {field} {username!r} ({model._meta.label}){hint}")
