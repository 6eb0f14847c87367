"""The host's site-wide odds and ends that are not the demo: the icon browsers ask for."""

from functools import cache
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

ICON = Path(__file__).parent / "messenger" / "static" / "messenger" / "favicon.svg"


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
