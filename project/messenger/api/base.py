"""A small JSON layer for the REST API: auth, body parsing, errors as 4xx with a reason."""

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt
from psycopg_pool import PoolTimeout

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.contracts import content
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.credentials.tokens import authenticate, bearer_token

from ..services.errors import Conflict, DomainError, Forbidden, InvalidInput, NotFound

MAX_BODY_BYTES = 64 * 1024
POOL_BUSY = (
    "Service Unavailable: no database connection free within DATABASE_POOL_TIMEOUT; "
    "nothing was done, retry"
)
WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})  # what the writes rate limit counts


class BadRequest(InvalidInput):
    """The request itself is malformed: not JSON, a field missing or of the wrong type."""


class CsrfRefused(Forbidden):
    """A session-authenticated request without Django's CSRF token."""


# The one place a refusal becomes an HTTP status; subclasses answer as their base class.
STATUS_OF_ERROR: dict[type[DomainError], int] = {
    InvalidInput: 400,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
}


def status_of(error: DomainError) -> int:
    """The HTTP status for a refusal (its nearest class in STATUS_OF_ERROR)."""
    for cls in type(error).__mro__:
        if cls in STATUS_OF_ERROR:
            return STATUS_OF_ERROR[cls]
    raise TypeError(f"no HTTP status for {type(error).__name__}; add it to STATUS_OF_ERROR")


def _no_response(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


def caller(request: HttpRequest) -> UUID:
    """The user behind a request: the same JWT as the hub (header only), or the session."""
    headers = {b"authorization": request.headers.get("Authorization", "").encode("latin-1")}
    token = bearer_token(headers, {})
    session = token is None and request.user.is_authenticated
    # A cookie rides along with any site's form post: session callers must pass Django's
    # CSRF check (bearer tokens cannot be forged by another site).
    if session and CsrfViewMiddleware(_no_response).process_view(request, _no_response, (), {}):
        raise CsrfRefused("CSRF check failed for a session-authenticated request")
    return authenticate(token, request.user, load_hub_options())


def body(request: HttpRequest) -> dict[str, Any]:
    """The request's JSON object, refused (400 naming the field) unless every value in
    it is one the database stores and both hub protocols carry exactly (integers within
    ±(2^53 - 1), no NaN or Infinity, bounded nesting and strings: contracts/content.py)."""
    if not request.body:
        return {}
    try:
        data = json.loads(request.body, parse_constant=_refuse_constant)
    except RecursionError:
        raise BadRequest("the body is nested too deeply") from None
    except ValueError as exc:  # (a refused constant is a BadRequest already)
        raise BadRequest("the body is not valid JSON") from exc
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    refuse_unstorable(data)
    check_content(data, "", body_limits())
    return data


def _refuse_constant(name: str) -> Any:
    """json.loads reads NaN, Infinity and -Infinity, which JSON does not have."""
    raise BadRequest(f"the body must not contain {name} (JSON has no such number)")


def content_limits() -> content.ContentLimits:
    """What a user-content field (`fileMeta`) may hold: the hub's CONTENT_MAX_* settings."""
    return content.api_limits(load_hub_options())


def body_limits() -> content.ContentLimits:
    """The whole body: a content field one level down; how many ids a list holds and
    how long a text field is are each field's own rule (its view or use case)."""
    limits = content_limits()
    return dataclasses.replace(content.WIRE_LIMITS, max_depth=limits.max_depth + 1)


def check_content(value: Any, field: str, limits: content.ContentLimits) -> None:
    """Refuse (400 naming the field) a value past `limits` or the wire's rule."""
    try:
        content.check(value, field, limits)
    except content.ContentError as exc:
        raise BadRequest(str(exc)) from None


def _unstorable(text: str) -> bool:
    """NUL (PostgreSQL rejects it in text and jsonb) or a lone surrogate (not UTF-8)."""
    return "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text)


def refuse_unstorable(value: Any, field: str = "") -> None:
    """Refuse any string (key or value, at any depth) the database cannot store, naming
    its field (`fileMeta.name`, `memberIds[0]`), before a use case sees it. Iterative:
    no nesting makes it recurse."""
    stack = [(value, field)]
    while stack:
        item, name = stack.pop()
        if isinstance(item, str) and _unstorable(item):
            raise BadRequest(f"{name} must not contain NUL or unpaired surrogate characters")
        if isinstance(item, dict):
            for key, child in item.items():
                if _unstorable(str(key)):
                    raise BadRequest(
                        f"{name or 'the body'} has a key with NUL or unpaired surrogates"
                    )
                stack.append((child, f"{name}.{key}" if name else str(key)))
        elif isinstance(item, list):
            stack.extend((child, f"{name}[{i}]") for i, child in enumerate(item))


def path_ids(kwargs: dict[str, Any]) -> dict[str, Any]:
    """URL ids (`chat_id`, ...) as UUIDs; a malformed one is a 400 naming it (`chatId`)."""
    parsed = dict(kwargs)
    for key, value in kwargs.items():
        if key.endswith("_id"):
            head, _, _ = key.partition("_")
            parsed[key] = uuid_of({f"{head}Id": value}, f"{head}Id")
    return parsed


def uuid_of(data: dict[str, Any], key: str) -> UUID:
    try:
        value = data[key]
        if isinstance(value, UUID):
            return value
        return UUID(str(value))
    except KeyError as exc:
        raise BadRequest(f"{key} is required") from exc
    except ValueError as exc:
        raise BadRequest(f"{key} must be a UUID") from exc


def text_of(data: dict[str, Any], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    return value


def int_of(data: dict[str, Any], key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{key} must be an integer")
    return value


Handler = Callable[..., Any]


def endpoint(**methods: Handler) -> Callable[..., HttpResponse]:
    """A view dispatching by HTTP method to handlers(user_id, request, **url_kwargs).

    A handler returns (status, payload) or a payload (200). Refusals become JSON
    {"error": reason} with the status of the DomainError's class; nothing is written then,
    since every use case runs in one transaction.
    """

    @csrf_exempt
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        try:
            return answer(request, **kwargs)
        except OperationalError as exc:
            if not isinstance(exc.__cause__, PoolTimeout):
                raise
            # Every connection of the process's pool stayed busy for DATABASE_POOL_TIMEOUT:
            # the request did nothing; say so and when to come back, not a bare 500.
            response = JsonResponse({"error": POOL_BUSY}, status=503)
            response["Retry-After"] = "1"
            return response

    def answer(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        handler = methods.get(request.method.lower() if request.method else "")
        if handler is None:
            allowed = ", ".join(m.upper() for m in methods)
            response = JsonResponse({"error": f"method not allowed; use {allowed}"}, status=405)
            response["Allow"] = allowed
            return response
        try:
            user_id = caller(request)
        except CsrfRefused as exc:
            return JsonResponse({"error": str(exc)}, status=status_of(exc))
        except InvalidToken as exc:
            response = JsonResponse({"error": f"Unauthorized: {exc}"}, status=401)
            response["WWW-Authenticate"] = 'Bearer realm="messenger"'
            return response
        if request.method in WRITES:
            refusal = ratelimit.check(ratelimit.WRITES, user_id, load_hub_options())
            if refusal is not None:
                response = JsonResponse({"error": str(refusal)}, status=429)
                response["Retry-After"] = str(refusal.retry_after)
                return response
        try:
            if len(request.body) > MAX_BODY_BYTES:  # whether or not the handler reads it
                raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes")
            result = handler(user_id, request, **path_ids(kwargs))
        except DomainError as exc:
            return JsonResponse({"error": str(exc)}, status=status_of(exc))
        status, payload = result if isinstance(result, tuple) else (200, result)
        if payload is None:
            return HttpResponse(status=204)
        return JsonResponse(payload, status=status, safe=False)

    return functools.update_wrapper(view, next(iter(methods.values())))
