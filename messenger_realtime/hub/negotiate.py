"""POST /hubs/messenger/negotiate: who may connect, and how (WebSockets only)."""

import logging
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.auth import authenticate, bearer_token, new_connection_token

logger = logging.getLogger(__name__)

# JSON over text frames only (MessagePack is not offered); no stateful reconnect.
TRANSPORTS = [{"transport": "WebSockets", "transferFormats": ["Text"]}]
MAX_NEGOTIATE_VERSION = 1


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
    connection_id, connection_token = new_connection_token(user_id)
    version = min(requested, MAX_NEGOTIATE_VERSION)
    body: dict[str, Any] = {"negotiateVersion": version, "availableTransports": TRANSPORTS}
    if version >= 1:
        body.update(connectionId=connection_id, connectionToken=connection_token)
    else:
        # Version 0 has no token: the client sends the connectionId as `id`, so the
        # signed token itself serves as the id.
        body.update(connectionId=connection_token)
    return _cors(request, JsonResponse(body))
