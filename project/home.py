"""`/`: a small page saying where things are (the hub, the REST API, the admin, the health
probe; the demo when it is on), so a first visit does not meet a 404."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from messenger_realtime.hub.routing import HUB_PATH


@require_safe
def page(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "home.html",
        {"hub_path": f"/{HUB_PATH}", "demo": bool(getattr(settings, "DEMO_ENABLED", False))},
    )
