"""Django sessions as credentials (the project's own pages): the session a request's
cookie names, when it ends, whether it still holds, and the same-origin rule that guards
its cookie (a cookie rides along with any page's request, so a session is accepted only
from this server's own origin or a configured one: credentials/request.py)."""

from importlib import import_module
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from django.conf import settings
from django.contrib.auth import SESSION_KEY


def session_of(headers: dict[bytes, bytes]) -> Any:
    """The Django session store named by the request's session cookie, or None."""
    from django.http import parse_cookie

    cookie = headers.get(b"cookie")
    key = (
        parse_cookie(cookie.decode("latin-1")).get(settings.SESSION_COOKIE_NAME) if cookie else None
    )
    if not key:
        return None
    return import_module(settings.SESSION_ENGINE).SessionStore(key)


def session_expiry(session: Any) -> float | None:
    """When a Django session ends (unix time): the stored expiry of a database-backed
    session (the store's own get_expiry_date() counts from now, not from the last save),
    else what the store says; None without a session."""
    if session is None:
        return None
    stored = getattr(session, "_get_session_from_db", None)  # db and cached_db stores
    row = stored() if stored is not None else None
    if row is not None:
        return float(row.expire_date.timestamp())
    return float(session.get_expiry_date().timestamp())


def session_holds(session_key: str, user_id: UUID) -> bool:
    """Whether the Django session `session_key` still exists (neither logged out nor
    expired) and is still `user_id`'s (synchronous: reads the session store)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return bool(store.load().get(SESSION_KEY) == str(user_id))


_HTTP_SCHEME = {"ws": "http", "wss": "https"}
_DEFAULT_PORT = {"http": 80, "https": 443}


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether a page at `origin` is this server, reached as `scheme`://`host`: scheme,
    host and port all equal (an http page of the same host may not use an https session)."""
    page_scheme = _HTTP_SCHEME.get(scheme, scheme)
    page, here = urlsplit(origin), urlsplit(f"//{host}")
    try:
        page_port = page.port or _DEFAULT_PORT.get(page.scheme)
        here_port = here.port or _DEFAULT_PORT.get(page_scheme)
    except ValueError:  # a port out of range: not ours
        return False
    return (page.scheme, page.hostname, page_port) == (page_scheme, here.hostname, here_port)
