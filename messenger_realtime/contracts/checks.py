"""System checks on what the host provides: DOMAIN_PORT names an importable DomainPort
(E011, both roles read it); a port that reads calls has the media secrets set (E012: media
credentials are minted for calls alone); the user model's ids are UUIDs (E032)."""

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, register
from django.db import models
from django.utils.module_loading import import_string

from messenger_realtime.conf.checks import HUB_TAG, WORKER_TAG
from messenger_realtime.conf.settings import collect, env_name
from messenger_realtime.contracts.port import port_problem

MEDIA_SECRETS = ("MEDIA_JWT_SIGNING_KEY", "TURN_SHARED_SECRET")


@register(WORKER_TAG, HUB_TAG)
def check_domain_port(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    values, _ = collect()
    problem = port_problem(str(values.get("DOMAIN_PORT", "")))
    if problem is None:
        return []
    return [
        Error(
            f"MESSENGER_REALTIME['DOMAIN_PORT'] {problem}.",
            hint=f"Fix settings.MESSENGER_REALTIME['DOMAIN_PORT'] or ${env_name('DOMAIN_PORT')}.",
            id="messenger_realtime.E011",
        )
    ]


@register(HUB_TAG)
def check_media_secrets(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    values, _ = collect()
    path = str(values.get("DOMAIN_PORT", ""))
    if port_problem(path) is not None:
        return []  # E011 says why
    port_class = import_string(path)
    if not getattr(port_class, "provides", lambda _: True)("calls"):
        return []  # no calls, no media credentials: the secrets may stay unset
    return [
        Error(
            f"MESSENGER_REALTIME[{key!r}] must be set, at least 32 bytes: the DomainPort "
            f"({path}) reads calls, and the hub mints media credentials for them.",
            hint=f"Set settings.MESSENGER_REALTIME[{key!r}] or ${env_name(key)}.",
            id="messenger_realtime.E012",
        )
        for key in MEDIA_SECRETS
        if values.get(key, "") == ""
    ]


@register(WORKER_TAG, HUB_TAG)
def check_user_model(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The spec's user ids are Guids: tokens carry them, groups (`user.<uuid>`) and the
    outbox's target_user_id store them. A user model with integer ids would fail only at
    the first connect; here it fails at `check`, naming the setting."""
    try:
        user_model = apps.get_model(settings.AUTH_USER_MODEL, require_ready=False)
    except (LookupError, ValueError):
        return []  # Django's own auth checks name it
    if isinstance(user_model._meta.pk, models.UUIDField):
        return []
    pk = user_model._meta.pk
    return [
        Error(
            f"AUTH_USER_MODEL ({settings.AUTH_USER_MODEL}) has a {type(pk).__name__} "
            "primary key; messenger_realtime identifies users by UUID (the spec's Guid).",
            hint="Give the user model `id = models.UUIDField(primary_key=True, "
            "default=uuid.uuid4)` before its first migration (docs/integration.md, step 2).",
            id="messenger_realtime.E032",
        )
    ]
