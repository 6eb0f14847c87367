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

The channel layer's verdict (LayerVerdict, one per process and layer) is shared with
negotiate (hub/negotiate.py): a negotiate reads it, answered by a probe at most every
FRESH_FOR seconds (not a Redis round trip per connect), and answers 503 while the layer
is unreachable; a connection whose first Redis operation fails reports it here (noted())
instead of a traceback. The verdict logs once when the layer goes and once when it is
back, whatever number of requests met it meanwhile.
"""

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from messenger_realtime.exceptions import database_cause
from messenger_realtime.ops import network
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)

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
    layer_cause = await layer_verdict().cause(max_age=0)  # logs its own changes
    causes = {"database": await _database(), "channelLayer": layer_cause}
    _log_change("database", causes["database"])
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


async def _channel_layer(layer: Any = None) -> str | None:
    """Why the channel layer's Redis servers do not all answer a PING (None: they do)."""
    layer = get_channel_layer() if layer is None else layer
    if not hasattr(layer, "connection"):  # in-memory: nothing to reach
        return None
    try:  # every Redis server of a sharded layer: each holds some groups and queues
        for index in range(layer.ring_size):
            await layer.connection(index).ping()
    except Exception as exc:
        return _words(exc)
    return None


FRESH_FOR = 1.0  # seconds a verdict on the channel layer is reused by negotiate
LAYER_PROBE_TIMEOUT = 2.0  # seconds a probe waits for every Redis server's PONG


class LayerVerdict:
    """Whether the channel layer's Redis servers answer, and why not: probed at most every
    FRESH_FOR seconds (concurrent askers share one probe), or learnt from a failure seen
    elsewhere (noted()). Logs a change once: unavailable with the cause, then back."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.verdict: str | None = None  # redis-py's words (host and port, no password)
        self.at = float("-inf")  # when the verdict was made (monotonic)
        self.probing: asyncio.Future[str | None] | None = None

    async def cause(self, max_age: float = FRESH_FOR) -> str | None:
        """Why the layer is unreachable (None: it answers), no older than `max_age`."""
        if time.monotonic() - self.at <= max_age:
            return self.verdict
        probing = self.probing
        loop = asyncio.get_running_loop()
        if probing is None or probing.done() or probing.get_loop() is not loop:
            probing = self.probing = asyncio.ensure_future(self._probe())
        return await asyncio.shield(probing)

    async def _probe(self) -> str | None:
        try:
            cause = await asyncio.wait_for(_channel_layer(self.layer), LAYER_PROBE_TIMEOUT)
        except TimeoutError:
            cause = f"no answer from the channel layer's Redis within {LAYER_PROBE_TIMEOUT:g} s"
        self._set(cause)
        return cause

    def noted(self, exc: BaseException) -> None:
        """A Redis operation of the layer failed (a connection's first join): the layer
        counts as unreachable until a probe says otherwise."""
        self._set(_words(exc))

    def _set(self, cause: str | None) -> None:
        previous, self.verdict, self.at = self.verdict, cause, time.monotonic()
        if cause is not None and previous is None:
            fields = {"action": "ready", "check": "channelLayer"}
            logger.warning("not ready: channel layer unavailable: %s", cause, extra=fields)
        elif cause is None and previous is not None:
            fields = {"action": "ready", "check": "channelLayer"}
            logger.info("ready: channel layer reachable again", extra=fields)


_verdicts: "weakref.WeakKeyDictionary[Any, LayerVerdict]" = weakref.WeakKeyDictionary()


def layer_verdict() -> LayerVerdict:
    """The process's verdict on its channel layer (one per layer object)."""
    layer = get_channel_layer()
    verdict = _verdicts.get(layer)
    if verdict is None:
        verdict = _verdicts[layer] = LayerVerdict(layer)
    return verdict


def _words(exc: BaseException) -> str:
    """The first line of an error's text (redis-py names the host and port), bounded."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
