"""What E038 and E039 call a placeholder or a weak SECRET_KEY, as a table; random keys of
every shape the docs and scripts make are never flagged."""

import secrets

import pytest

from messenger_realtime.conf.secrets import django_key_problem, is_placeholder


@pytest.mark.parametrize(
    "value",
    [
        "change-me-change-me-change-me-change-me",  # compose.yaml's, before issue 46
        "CHANGE_ME_" + secrets.token_hex(32),
        "ChangeMe" + secrets.token_urlsafe(48),
        "replace-me-with-a-long-random-string-of-your-own",
        "your-secret-key-goes-here-and-is-long-enough-now",
        "super-secret-jwt-key-super-secret-jwt-key",
        "django-insecure-" + secrets.token_urlsafe(40),
        "a" * 64,
        "0123456789" * 6,
    ],
)
def test_a_placeholder_is_flagged(value: str) -> None:
    assert is_placeholder(value)


def test_random_keys_are_never_placeholders() -> None:
    for _ in range(2_000):
        for key in (secrets.token_urlsafe(48), secrets.token_hex(32), secrets.token_urlsafe(32)):
            assert not is_placeholder(key), key
            assert django_key_problem(secrets.token_urlsafe(48)) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("x" * 49 + "yz", "3 distinct characters, fewer than 5"),
        (secrets.token_urlsafe(48)[:49], "49 characters, fewer than 50"),
        ("django-insecure-" + secrets.token_urlsafe(48), "starts with 'django-insecure-'"),
    ],
)
def test_django_s_own_rule_names_why_a_secret_key_is_weak(value: str, problem: str) -> None:
    assert problem in (django_key_problem(value) or "")
