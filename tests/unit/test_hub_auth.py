"""The hub's pure credential rules: the same-origin check of session WebSockets and the
access token's expiry."""

import pytest

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.credentials.sessions import same_origin
from messenger_realtime.hub.credentials.tokens import mint_access_token, read_access_token
from messenger_realtime.uuid7 import uuid7


@pytest.mark.parametrize(
    ("origin", "scheme", "host", "same"),
    [
        ("http://app.example", "ws", "app.example", True),
        ("http://app.example:80", "ws", "app.example", True),
        ("https://app.example", "wss", "app.example:443", True),
        ("http://app.example", "wss", "app.example", False),  # an http page, a wss socket
        ("https://app.example", "ws", "app.example", False),
        ("http://app.example:8000", "ws", "app.example:8001", False),
        ("http://evil.example", "ws", "app.example", False),
        ("http://app.example:99999", "ws", "app.example", False),
        ("null", "ws", "app.example", False),
    ],
)
def test_same_origin_compares_scheme_host_and_port(
    origin: str, scheme: str, host: str, same: bool
) -> None:
    assert same_origin(origin, scheme, host) is same


def test_read_access_token_returns_the_subject_and_the_expiry() -> None:
    options = load_hub_options()
    user = uuid7()
    identity = read_access_token(mint_access_token(user, options, lifetime=60), options)
    assert identity.user_id == user
    assert identity.expires_at is not None and identity.expires_at > 0
