"""The demo chat page: sign in as a demo user (no password), chat through the REST API and
the hub. Only with DEMO_ENABLED (scripts/serve turns it on); 404 otherwise."""

from functools import wraps
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth import login, logout
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.credentials.tokens import mint_access_token

from .models import User

TOKEN_LIFETIME = 600.0


def demo_only(view: Any) -> Any:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not getattr(settings, "DEMO_ENABLED", False):
            raise Http404("the demo is off (DEMO_ENABLED)")
        return view(request, *args, **kwargs)  # type: ignore[no-any-return]

    return wrapper


@demo_only
@require_GET
def page(request: HttpRequest) -> HttpResponse:
    users = User.objects.filter(is_active=True, username__startswith="demo-").order_by("username")
    return render(request, "demo.html", {"users": users})


@demo_only
@require_POST
def sign_in(request: HttpRequest) -> HttpResponse:
    user = User.objects.filter(
        username=request.POST.get("username", ""), username__startswith="demo-", is_active=True
    ).first()
    if user is None:
        return render(request, "demo.html", {"error": "pick one of the demo users"}, status=400)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("demo")


@demo_only
@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    logout(request)
    return redirect("demo")


@demo_only
@require_GET
def token(request: HttpRequest) -> JsonResponse:
    """A short-lived bearer token for the signed-in user (same-origin only: no CORS)."""
    if not request.user.is_authenticated:
        return JsonResponse({"error": "sign in first"}, status=401)
    user_id = UUID(str(request.user.pk))
    value = mint_access_token(user_id, load_hub_options(), TOKEN_LIFETIME)
    return JsonResponse({"token": value, "userId": str(user_id), "expiresIn": TOKEN_LIFETIME})
