"""Who is calling, from an ASGI scope: the same rules for every transport.

A bearer token (the `Authorization` header, or the `access_token` query parameter that
browsers must use for WebSockets and that EventSource always uses) wins; otherwise the
Django session of the project's own pages, accepted only from the same origin (scheme,
host and port) or a configured origin: a cookie rides along with any page's request
(cross-site WebSocket hijacking, and the same for the hub's HTTP endpoint).
"""

from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.credentials import sessions, tokens
from messenger_realtime.hub.reads import hub_read

CORS_HEADERS = b"authorization, content-type, x-requested-with, x-signalr-user-agent"


def query_of(scope: dict[str, Any]) -> dict[str, list[str]]:
    return parse_qs(scope.get("query_string", b"").decode("latin-1"))


async def identify_scope(
    scope: dict[str, Any], options: HubOptions, *, lookup: bool = True
) -> tuple[tokens.Identity, str | None]:
    """(the caller's identity, its bearer token or None); InvalidToken otherwise.

    At most one thread hop: a bearer token without `lookup` is checked inline (its
    signature and claims); anything that reads the database (the user's standing, the
    session's user) is read in one go."""
    headers = dict(scope.get("headers", []))
    token = tokens.bearer_token(headers, query_of(scope))
    if token is not None and not lookup:
        return tokens.read_access_token(token, options), token
    identity: tokens.Identity = await _identify(scope, headers, token, options, lookup)
    return identity, token


@hub_read
def _identify(
    scope: dict[str, Any],
    headers: dict[bytes, bytes],
    token: str | None,
    options: HubOptions,
    lookup: bool,
) -> tokens.Identity:
    """identify_scope's reads, synchronous (in the thread the hop runs on)."""
    user, session = None, None
    if token is None:
        # The Django session (the project's own pages), read only now that no token
        # came: Channels' cookie, session and auth middleware would make a session store
        # for every connection, and read the user in a thread hop of its own, bearer or
        # not (and hold both, and their copies of the scope, for the connection's life).
        session = scope.get("session") or sessions.session_of(headers)
        user = scope.get("user")
        if user is None and session is not None:
            from django.contrib.auth import get_user

            user = get_user(SimpleNamespace(session=session))  # type: ignore[arg-type]
        authenticated = user is not None and user.is_authenticated
        if authenticated and not same_site(scope, headers, options):
            raise InvalidToken("origin not allowed for session authentication")
        if not authenticated:
            session = None
    return tokens.identify(token, user, options, session, lookup=lookup)


def same_site(scope: dict[str, Any], headers: dict[bytes, bytes], options: HubOptions) -> bool:
    origin = headers.get(b"origin", b"").decode("latin-1")
    if not origin:
        return True  # not a browser: no ambient cookie to abuse
    host = headers.get(b"host", b"").decode("latin-1")
    default = "ws" if scope.get("type") == "websocket" else "http"
    # WebSockets: the scheme is set by hub/daphne/websocket_protocol.py.
    scheme = str(scope.get("scheme") or default)
    return sessions.same_origin(origin, scheme, host) or origin in options.cors_allowed_origins


def cors_headers(
    scope: dict[str, Any], options: HubOptions, methods: bytes
) -> list[tuple[bytes, bytes]]:
    """The CORS answer to a configured origin (CORS_ALLOWED_ORIGINS); none otherwise."""
    origin = dict(scope.get("headers", [])).get(b"origin", b"").decode("latin-1")
    if not origin or origin not in options.cors_allowed_origins:
        return []
    return [
        (b"access-control-allow-origin", origin.encode()),
        (b"access-control-allow-credentials", b"true"),
        (b"access-control-allow-methods", methods),
        (b"access-control-allow-headers", CORS_HEADERS),
        (b"vary", b"Origin"),
    ]
