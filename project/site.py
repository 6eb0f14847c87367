"""The host's site-wide pages that are not the demo: `/`, saying where things are (the
hub, the REST API, the admin, the health probe; the demo when it is on), so a first visit
does not meet a 404, and the icon browsers ask for."""

from functools import cache
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from messenger_realtime.hub.routing import HUB_PATH

ICON = Path(__file__).parent / "messenger" / "static" / "messenger" / "favicon.svg"


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "home.html",
        {"hub_path": f"/{HUB_PATH}", "demo": bool(getattr(settings, "DEMO_ENABLED", False))},
    )


@cache
def _icon() -> bytes:
    return ICON.read_bytes()


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico: browsers ask for it on every origin (the admin, the API's error pages
    too); the SVG the demo page links, rather than a 404 in every log."""
    response = HttpResponse(_icon(), content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response
