"""Deployment checks of the host (`manage.py check --deploy`)."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register


@register(Tags.security, deploy=True)
def demo_is_off(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """The demo page signs anyone in as a demo user without a password."""
    if getattr(settings, "DEMO_ENABLED", False):
        return [
            Warning(
                "DEMO_ENABLED is true: /demo/ signs anyone in as a demo user without a password.",
                hint="Unset DEMO_ENABLED (or set it to false) in production.",
                id="messenger.W001",
            )
        ]
    return []
