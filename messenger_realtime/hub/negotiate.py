"""POST /hubs/messenger/negotiate: who may connect, and how (the transports of TRANSPORTS,
JSON or MessagePack, and stateful reconnect when the client asks for it).

A plain ASGI application, routed ahead of Django (project/asgi.py): every connect
starts here, and Django's request path (its middleware, and a thread of its own per
request to run them) cost a connect more than the rest of negotiate together
(docs/performance.md). The credentials are read as every hub request reads them
(credentials/request.py: a bearer token, else the session of the project's own pages
from the same origin), with one database read (the user's standing). A user whose
connects the rate limit refused lately is refused before that read, from the process's
memo (hub/admission.py, Refusals), with the same reason and the wait left.

Admission control: while ADMISSION_LIMIT connects are in progress in this process
(hub/admission.py; an admitted negotiate's slot is held until the transport of the
connection it granted opens), a negotiate waits in line for one to finish, up to ADMISSION_WAIT
seconds, then answers 503 with Retry-After: a reconnect storm is admitted at the
process's full rate, first come first served, instead of piling up handshakes that
time out or spending the clients' few retries on refusals.

A channel layer (Redis) that does not answer makes every connection fail at its first
join, and the clients then blame sticky sessions: so while the process's verdict on the
layer (ops/webhealth.LayerVerdict: a probe at most every second, shared with
/health/ready) says it is unreachable, negotiate answers 503 with Retry-After and the
cause in words (without the internal host, which only the log and /health/ready name).
"""

import json
import time
from typing import Any
from urllib.parse import parse_qs

from messenger_realtime.conf.settings import HubOptions, load_hub_options
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub import admission, ratelimit, user_connections
from messenger_realtime.hub.credentials.request import cors_headers, identify_scope, query_of
from messenger_realtime.hub.credentials.tokens import (
    bearer_token,
    new_connection_token,
    read_access_token,
)
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger
from messenger_realtime.ops.webhealth import layer_verdict

logger = get_logger(__name__)

# ASP.NET Core's order; Server-Sent Events carry text (JSON) only.
FORMATS = {
    "WebSockets": ["Text", "Binary"],
    "ServerSentEvents": ["Text"],
    "LongPolling": ["Text", "Binary"],
}
MAX_NEGOTIATE_VERSION = 1
JSON = (b"content-type", b"application/json")
ALLOWED = b"POST, OPTIONS"
LAYER_RETRY_AFTER = 5  # seconds: Redis coming back takes a moment (the verdict: 1 s)
LAYER_DOWN = (
    "Service unavailable: the hub cannot reach its channel layer (Redis), so no "
    "connection could receive events; retry later"
)


def available_transports(options: HubOptions) -> list[dict[str, Any]]:
    return [
        {"transport": name, "transferFormats": formats}
        for name, formats in FORMATS.items()
        if name in options.transports
    ]


def _query_value(query: dict[str, list[str]], name: str, default: str) -> str:
    """A query parameter by name in any case (as ASP.NET reads them)."""
    wanted = name.lower()
    return next((v[-1] for k, v in query.items() if k.lower() == wanted and v), default)


def wants_stateful(query: dict[str, list[str]], options: HubOptions) -> bool:
    """The client asked (`useStatefulReconnect=true`, any case) and the hub offers it:
    a replay buffer, over WebSockets. Never granted unasked: the client would fail."""
    asked = _query_value(query, "useStatefulReconnect", "")
    offered = options.stateful_reconnect_buffer_size > 0 and "WebSockets" in options.transports
    return asked.lower() == "true" and offered


async def negotiate(hub: HubProcess, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI application of POST (and OPTIONS) {hub}/negotiate, for the process `hub`
    (hub/routing.py binds it)."""
    while True:  # the body means nothing here; read it to its end (or the client's going)
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("more_body"):
            break
    status, body, headers = await answer(hub, scope)
    options = load_hub_options()
    extra = cors_headers(scope, options, ALLOWED)
    if extra and status == 204:
        extra.append((b"access-control-max-age", b"600"))
    length = (b"content-length", str(len(body)).encode())
    start = {"type": "http.response.start", "status": status, "headers": [*headers, *extra, length]}
    await send(start)
    await send({"type": "http.response.body", "body": body})


async def answer(
    hub: HubProcess, scope: dict[str, Any]
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """(status, body, headers) of a negotiate request."""
    method = scope["method"]
    if method == "OPTIONS":
        return 204, b"", []
    if method != "POST":
        return 405, _json({"error": "negotiate takes POST"}), [JSON, (b"allow", ALLOWED)]
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    # Version errors use the protocol's own {"error": ...} body (status 200), which
    # every SignalR client shows its caller.
    raw = _query_value(query, "negotiateVersion", "0")
    try:
        requested = int(raw)
    except ValueError:
        return 200, _json({"error": "The client requested a non-integer protocol version."}), [JSON]
    if requested < 0:
        error = (
            f"The client requested version '{requested}', "
            "but the server does not support this version."
        )
        return 200, _json({"error": error}), [JSON]
    if await layer_verdict().cause() is not None:  # logged once per outage (webhealth)
        retry = (b"retry-after", str(LAYER_RETRY_AFTER).encode())
        return 503, _json({"error": LAYER_DOWN}), [JSON, retry]
    options = load_hub_options()
    hint = token_user(scope, options)  # the bearer token's user, read without the database
    if hint is not None:
        refused = hub.admission.refusals.holding(hint, time.monotonic())
        if refused is not None:  # no read, no round trip: admission.Refusals
            metrics.hub_rate_limited.labels(scope=ratelimit.CONNECTS).inc()
            return _too_many(hint, str(refused), refused.retry_after)
    async with hub.admission.connect(options) as slot:
        if slot is None:
            busy = _json({"error": "Service unavailable: too many connects in progress"})
            return 503, busy, [JSON, (b"retry-after", str(admission.RETRY_AFTER).encode())]
        try:
            identity, _ = await identify_scope(scope, options)
        except InvalidToken as exc:
            logger.info("negotiate refused", extra={"action": "refused", "reason": str(exc)})
            www = (b"www-authenticate", b'Bearer realm="messenger"')
            return 401, _json({"error": f"Unauthorized: {exc}"}), [JSON, www]
        user = str(identity.user_id)
        if not hub.admission.may_hold(user, options):  # its slot is released on the way out
            return _too_many(user, "too many connects in progress for this user")
        version = min(requested, MAX_NEGOTIATE_VERSION)
        stateful = version >= 1 and wants_stateful(query, options)
        connection_id, connection_token = new_connection_token(identity.user_id, stateful=stateful)
        # The connect rate limit and the user's cap, in one round trip.
        taken = await hub.take_place(identity.user_id, connection_id, options)
        if taken.limited is not None:
            if hint is not None:  # a session's negotiate has no user to look up before
                hub.admission.refusals.hold(user, taken.limited, time.monotonic())
            return _too_many(user, str(taken.limited), taken.limited.retry_after)
        if not taken.granted:
            reason = user_connections.refusal(options)
            return _too_many(user, reason, user_connections.RETRY_AFTER)
        slot.hold_for(connection_id, user)  # until its transport opens (hub/admission.py)
    granted: dict[str, Any] = {"negotiateVersion": version}
    if version >= 1:
        granted.update(connectionId=connection_id, connectionToken=connection_token)
        if stateful:
            granted["useStatefulReconnect"] = True
    else:
        # Version 0 has no token: the client sends the connectionId as `id`, so the
        # signed token itself serves as the id.
        granted.update(connectionId=connection_token)
    granted["availableTransports"] = available_transports(options)
    return 200, _json(granted), [JSON]


def token_user(scope: dict[str, Any], options: HubOptions) -> str | None:
    """The user a bearer token names, checked inline (signature and claims, no database
    read), or None: no bearer token (a session's), or one the full read refuses."""
    token = bearer_token(dict(scope.get("headers", [])), query_of(scope))
    if token is None:
        return None
    try:
        return str(read_access_token(token, options).user_id)
    except InvalidToken:
        return None


def _too_many(
    user: str, reason: str, retry_after: int = admission.RETRY_AFTER
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    fields = {"action": "refused", "reason": reason, Field.USER_ID: user}
    logger.info("negotiate refused", extra=fields)
    retry = (b"retry-after", str(retry_after).encode())
    return 429, _json({"error": f"Too many requests: {reason}"}), [JSON, retry]


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
