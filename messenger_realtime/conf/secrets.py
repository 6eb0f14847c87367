"""Secrets that only look set: placeholders and keys weaker than their algorithm needs.

E012 (conf/declared.py) refuses a signing key shorter than HS256 needs everywhere; these
are the deployment checks' (E038, E039, `manage.py check --deploy`): a placeholder copied
from an example file, or a Django SECRET_KEY that Django itself calls weak, lets anyone
who has read the example mint tokens or sign sessions, yet passes a length rule.
"""

import os
import re

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)

# Words example files put where a secret goes, compared without case or separators
# ("change-me", "CHANGE_ME", "ChangeMe" alike). Long enough that a random key holds one
# only by a chance too small to matter (a 64-character key: below 1e-9 for the shortest).
PLACEHOLDER_WORDS = (
    "changeme",
    "replaceme",
    "placeholder",
    "insecure",
    "notasecret",
    "yoursecret",
    "secretkey",
    "mysecret",
    "supersecret",
    "example",
)
# A value that is one short piece repeated ("secretsecret…", "xxxx…", "ab12ab12…").
_REPEATED = re.compile(r"(.{1,16}?)\1+", re.S)
# How to make a real one, named in every hint.
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(48))'"


def is_placeholder(value: str) -> bool:
    """True for a value an example file would hold, never for a random key."""
    folded = re.sub(r"[^a-z0-9]", "", value.lower())
    return any(word in folded for word in PLACEHOLDER_WORDS) or bool(_REPEATED.fullmatch(value))


def django_key_problem(value: str) -> str | None:
    """Why Django's own rule (security.W009) calls SECRET_KEY weak, or None."""
    if value.startswith(SECRET_KEY_INSECURE_PREFIX):
        return f"starts with {SECRET_KEY_INSECURE_PREFIX!r} (startproject's development key)"
    if len(value) < SECRET_KEY_MIN_LENGTH:
        return f"has {len(value)} characters, fewer than {SECRET_KEY_MIN_LENGTH}"
    if len(set(value)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return (
            f"has {len(set(value))} distinct characters, fewer than "
            f"{SECRET_KEY_MIN_UNIQUE_CHARACTERS}"
        )
    return None


def variables_holding(value: str) -> list[str]:
    """The environment variables whose value this is: where a host read it from (the app
    cannot know the host's names; this names them without showing the value)."""
    if not value:
        return []
    return sorted(name for name, held in os.environ.items() if held == value)
