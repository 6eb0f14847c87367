"""Liveness and readiness of a web (Daphne) process, for Kubernetes probes.

/health/live  -> 200 while the process serves requests.
/health/ready -> 200 when PostgreSQL answers and the channel layer (Redis) does; 503 with
                 the failing dependency otherwise.
"""

from typing import Any

from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

PROBE_TIMEOUT = 3.0  # seconds to get a pooled connection before answering 503


@require_GET
def live(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
async def ready(request: HttpRequest) -> JsonResponse:
    checks = {"database": await _database(), "channelLayer": await _channel_layer()}
    ok = all(checks.values())
    return JsonResponse(
        {"status": "ok" if ok else "unavailable", **checks}, status=200 if ok else 503
    )


async def _database() -> bool:
    from asgiref.sync import sync_to_async

    def probe() -> bool:
        pool: Any = getattr(connection, "pool", None)  # Django's psycopg pool, if configured
        try:
            if pool is not None:
                # A fresh or checked connection from the pool, without waiting the pool's
                # request timeout: a probe must answer within the prober's own timeout.
                pool.open()
                with pool.connection(timeout=PROBE_TIMEOUT) as conn:
                    conn.execute("SELECT 1")
                return True
            connection.close_if_unusable_or_obsolete()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except Exception:
            connection.close()
            return False

    return bool(await sync_to_async(probe)())


async def _channel_layer() -> bool:
    layer: Any = get_channel_layer()
    if not hasattr(layer, "connection"):  # in-memory: nothing to reach
        return True
    try:  # every Redis server of a sharded layer: each holds some groups and queues
        return all([await layer.connection(index).ping() for index in range(layer.ring_size)])
    except Exception:
        return False
