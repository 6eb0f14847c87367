"""Users and tokens for hub tests."""

from typing import Any
from uuid import UUID

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.auth import mint_access_token
from project.messenger.models import User

_counter = iter(range(1_000_000))


def make_user(name: str = "user") -> User:
    return User.objects.create(username=f"{name}-{next(_counter)}", display_name=name)


def token_for(user_id: UUID, lifetime: float = 600, **overrides: Any) -> str:
    return mint_access_token(user_id, load_hub_options(**overrides), lifetime)
