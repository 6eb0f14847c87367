"""Django's error views, in JSON under /api/: no HTML page ever answers an API client.

project/urls.py names these as handler400/403/404/500; other paths keep Django's pages.
"""

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

API_PREFIX = "/api/"


def _api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400 (Django refused the request itself: too many fields, a bad Host, ...)."""
    if _api(request):
        return JsonResponse({"error": "bad request"}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _api(request):
        return JsonResponse({"error": "forbidden"}, status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404 for a path no API route matches (ids that do match are parsed by the endpoint)."""
    if _api(request):
        return JsonResponse({"error": "not found: no such endpoint"}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """500 without details (they are in the log, not in the response)."""
    if _api(request):
        return JsonResponse({"error": "internal server error"}, status=500)
    return defaults.server_error(request)
