"""Who is calling, from an ASGI scope: the same rules for every transport.

A bearer token (the `Authorization` header, or the `access_token` query parameter that
browsers must use for WebSockets and that EventSource always uses) wins; otherwise the
Django session of the project's own pages, accepted only from the same origin (scheme,
host and port) or a configured origin: a cookie rides along with any page's request
(cross-site WebSocket hijacking, and the same for the hub's HTTP endpoint).
"""

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub import auth


def query_of(scope: dict[str, Any]) -> dict[str, list[str]]:
    return parse_qs(scope.get("query_string", b"").decode("latin-1"))


async def identify_scope(
    scope: dict[str, Any], options: HubOptions, *, lookup: bool = True
) -> tuple[auth.Identity, str | None]:
    """(the caller's identity, its bearer token or None); InvalidToken otherwise."""
    headers = dict(scope.get("headers", []))
    token = auth.bearer_token(headers, query_of(scope))
    user = scope.get("user")  # the Django session (the project's own pages)
    session = token is None and user is not None and user.is_authenticated
    if session and not same_site(scope, headers, options):
        raise InvalidToken("origin not allowed for session authentication")
    identity: auth.Identity = await database_sync_to_async(auth.identify)(
        token, user, options, scope.get("session") if session else None, lookup=lookup
    )
    return identity, token


def same_site(scope: dict[str, Any], headers: dict[bytes, bytes], options: HubOptions) -> bool:
    origin = headers.get(b"origin", b"").decode("latin-1")
    if not origin:
        return True  # not a browser: no ambient cookie to abuse
    host = headers.get(b"host", b"").decode("latin-1")
    default = "ws" if scope.get("type") == "websocket" else "http"
    scheme = str(scope.get("scheme") or default)  # WebSockets: from hub/wsprotocol.py
    return auth.same_origin(origin, scheme, host) or origin in options.cors_allowed_origins
