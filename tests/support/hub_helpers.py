"""Tokens for hub tests."""

from typing import Any
from uuid import UUID

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.credentials.tokens import mint_access_token


def token_for(user_id: UUID, lifetime: float = 600, **overrides: Any) -> str:
    return mint_access_token(user_id, load_hub_options(**overrides), lifetime)
