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
        try:
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
    try:
        return bool(await layer.connection(0).ping())
    except Exception:
        return False
