"""POST /hubs/messenger/negotiate: who may connect, and how (the transports of TRANSPORTS,
JSON or MessagePack, and stateful reconnect when the client asks for it)."""

import logging
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from messenger_realtime.conf.settings import HubOptions, load_hub_options
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.auth import authenticate, bearer_token, new_connection_token

logger = logging.getLogger(__name__)

# ASP.NET Core's order; Server-Sent Events carry text (JSON) only.
FORMATS = {
    "WebSockets": ["Text", "Binary"],
    "ServerSentEvents": ["Text"],
    "LongPolling": ["Text", "Binary"],
}
MAX_NEGOTIATE_VERSION = 1


def available_transports(options: HubOptions) -> list[dict[str, Any]]:
    return [
        {"transport": name, "transferFormats": formats}
        for name, formats in FORMATS.items()
        if name in options.transports
    ]


def wants_stateful(request: HttpRequest, options: HubOptions) -> bool:
    """The client asked (`useStatefulReconnect=true`, any case) and the hub offers it:
    a replay buffer, over WebSockets. Never granted unasked: the client would fail."""
    asked = next(
        (str(v) for k, v in request.GET.items() if k.lower() == "usestatefulreconnect"), ""
    )
    offered = options.stateful_reconnect_buffer_size > 0 and "WebSockets" in options.transports
    return asked.lower() == "true" and offered


def _cors(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    origin = request.headers.get("Origin")
    if origin and origin in load_hub_options().cors_allowed_origins:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Allow-Credentials"] = "true"
        response["Access-Control-Allow-Methods"] = "POST, OPTIONS"
        response["Access-Control-Allow-Headers"] = (
            "authorization, content-type, x-requested-with, x-signalr-user-agent"
        )
        response["Access-Control-Max-Age"] = "600"
        response["Vary"] = "Origin"
    return response


def _authenticate(request: HttpRequest) -> UUID:
    headers = {b"authorization": request.headers.get("Authorization", "").encode("latin-1")}
    token = bearer_token(headers, parse_qs(request.META.get("QUERY_STRING", "")))
    return authenticate(token, request.user, load_hub_options())


@csrf_exempt
def negotiate(request: HttpRequest) -> HttpResponse:
    if request.method == "OPTIONS":
        return _cors(request, HttpResponse(status=204))
    if request.method != "POST":
        response = JsonResponse({"error": "negotiate takes POST"}, status=405)
        response["Allow"] = "POST, OPTIONS"
        return _cors(request, response)
    # ASP.NET reads the key case-insensitively. Version errors use the protocol's own
    # {"error": ...} body (status 200), which every SignalR client shows its caller.
    raw = next((str(v) for k, v in request.GET.items() if k.lower() == "negotiateversion"), "0")
    try:
        requested = int(raw)
    except ValueError:
        error = "The client requested a non-integer protocol version."
        return _cors(request, JsonResponse({"error": error}))
    if requested < 0:
        error = (
            f"The client requested version '{requested}', "
            "but the server does not support this version."
        )
        return _cors(request, JsonResponse({"error": error}))
    try:
        user_id = _authenticate(request)
    except InvalidToken as exc:
        logger.info("negotiate refused", extra={"action": "refused", "reason": str(exc)})
        response = JsonResponse({"error": f"Unauthorized: {exc}"}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="messenger"'
        return _cors(request, response)
    options = load_hub_options()
    version = min(requested, MAX_NEGOTIATE_VERSION)
    stateful = version >= 1 and wants_stateful(request, options)
    connection_id, connection_token = new_connection_token(user_id, stateful=stateful)
    body: dict[str, Any] = {"negotiateVersion": version}
    if version >= 1:
        body.update(connectionId=connection_id, connectionToken=connection_token)
        if stateful:
            body["useStatefulReconnect"] = True
    else:
        # Version 0 has no token: the client sends the connectionId as `id`, so the
        # signed token itself serves as the id.
        body.update(connectionId=connection_token)
    body["availableTransports"] = available_transports(options)
    return _cors(request, JsonResponse(body))
