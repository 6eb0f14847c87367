"""Liveness and readiness of a web (Daphne) process, for Kubernetes probes.

/health/live  -> 200 while the process serves requests and no wait on Redis or
                 PostgreSQL has outlived twice NETWORK_TIMEOUT (ops/network.py: the bound
                 that should have ended it failed, so the process is wedged: the hub's
                 reader would deliver nothing); 503 then, with "stalled": dependency ->
                 seconds overdue, so a supervisor restarts it.
/health/ready -> 200 when PostgreSQL answers and the channel layer (Redis) does; 503
                 otherwise, with each failing dependency's cause in "errors" (psycopg's
                 or redis-py's own words, which name the host and port but never a
                 password), logged once when it appears. Also 503 while the process
                 refuses to serve for a reason of its own (refuse(): a single-process
                 hub that finds another process dispatching, dispatch/in_process.py).

The probes answer on the pod's own port; the public proxy keeps /health/ready internal
(ops/nginx), since its causes name internal hosts.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from messenger_realtime.exceptions import database_cause
from messenger_realtime.ops import network

logger = logging.getLogger(__name__)

PROBE_TIMEOUT = 2.0  # seconds to get a pooled connection before asking libpq why not
CONNECT_TIMEOUT = 2  # seconds for that direct attempt: the probe answers within ~4 s
ASK_EVERY = 10.0  # seconds between two direct attempts (their answer is kept meanwhile)
_asked: tuple[float, str | None] = (float("-inf"), None)  # (when, libpq's cause or None)

# check name -> (why this process is not ready, whether that has passed)
_refusals: dict[str, tuple[str, Callable[[], bool]]] = {}
_logged: dict[str, str | None] = {}  # check name -> the cause last logged


def refuse(check: str, reason: str, lifted: Callable[[], bool]) -> None:
    """Answer 503 on /health/ready, naming `check` and `reason`, until `lifted()`."""
    _refusals[check] = (reason, lifted)


def refused(check: str) -> bool:
    """Whether `check` refuses readiness now (a refusal whose cause passed is dropped)."""
    refusal = _refusals.get(check)
    if refusal is not None and refusal[1]():
        del _refusals[check]
        return False
    return refusal is not None


@require_GET
def live(request: HttpRequest) -> JsonResponse:
    stalled = network.WAITS.wedged()
    if stalled:
        return JsonResponse({"status": "unavailable", "stalled": stalled}, status=503)
    return JsonResponse({"status": "ok"})


@require_GET
async def ready(request: HttpRequest) -> JsonResponse:
    causes = {"database": await _database(), "channelLayer": await _channel_layer()}
    for check, cause in causes.items():
        _log_change(check, cause)
    causes.update({check: _refusals[check][0] for check in list(_refusals) if refused(check)})
    errors = {check: cause for check, cause in causes.items() if cause is not None}
    body: dict[str, Any] = {"status": "unavailable" if errors else "ok"}
    body.update({check: cause is None for check, cause in causes.items()})
    if errors:
        body["errors"] = errors
    return JsonResponse(body, status=503 if errors else 200)


def _log_change(check: str, cause: str | None) -> None:
    """One log line when a dependency fails (with its cause) or recovers, not one per probe."""
    if _logged.get(check) == cause:
        return
    _logged[check] = cause
    if cause is not None:
        logger.warning("not ready: %s unavailable: %s", check, cause, extra={"action": "ready"})
    else:
        logger.info("ready: %s reachable again", check, extra={"action": "ready"})


async def _database() -> str | None:
    from asgiref.sync import sync_to_async

    def probe() -> str | None:
        pool: Any = getattr(connection, "pool", None)  # Django's psycopg pool, if configured
        try:
            if pool is not None:
                # A fresh or checked connection from the pool, without waiting the pool's
                # request timeout: a probe must answer within the prober's own timeout.
                pool.open()
                with pool.connection(timeout=PROBE_TIMEOUT) as conn:
                    conn.execute("SELECT 1")
                return None
            connection.close_if_unusable_or_obsolete()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return None
        except Exception as exc:
            connection.close()
            if pool is None:
                return database_cause(exc.__cause__ or exc)
            return _why_not(pool, exc)

    return await sync_to_async(probe)()


def _why_not(pool: Any, exc: Exception) -> str:
    """The pool only says it waited ("couldn't get a connection after 2.00 sec"); libpq
    says why (refused, authentication, an unknown database): ask it directly, at most
    once per ASK_EVERY seconds (the answer is kept meanwhile): when the server answers
    and every pooled connection is busy, one more connection per probe would only add
    to the load."""
    global _asked
    now = time.monotonic()
    if now - _asked[0] < ASK_EVERY:
        return _asked[1] or database_cause(exc)
    _asked = (now, None)
    try:
        kwargs = {**pool.kwargs, "connect_timeout": CONNECT_TIMEOUT}
        with psycopg.connect(pool.conninfo, **kwargs) as conn:
            conn.execute("SELECT 1")
    except Exception as direct:
        cause = database_cause(direct)
        _asked = (now, cause)
        return cause
    # The server answers: every pooled connection is busy (the pool's own words then).
    return database_cause(exc)


async def _channel_layer() -> str | None:
    layer: Any = get_channel_layer()
    if not hasattr(layer, "connection"):  # in-memory: nothing to reach
        return None
    try:  # every Redis server of a sharded layer: each holds some groups and queues
        for index in range(layer.ring_size):
            await layer.connection(index).ping()
    except Exception as exc:
        return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    return None
