"""The app's settings as the tests change and check them."""

from django.conf import settings
from django.core.checks import CheckMessage, run_checks
from django.test import override_settings

from tests.support.runtime import project_settings


def realtime(configured: dict[str, object]) -> override_settings:
    """The project's MESSENGER_REALTIME with some keys changed."""
    return override_settings(MESSENGER_REALTIME={**settings.MESSENGER_REALTIME, **configured})


def check_realtime_settings(tags: list[str] | None = None) -> list[CheckMessage]:
    """The app's system check messages (all roles, or the given roles' tags)."""
    found = run_checks(tags=tags)
    return [m for m in found if str(m.id).startswith("messenger_realtime.")]


def project_layer_hosts(**env: str) -> list[str]:
    """The channel layer hosts project/settings.py builds from this environment."""
    hosts = "[h['address'] for h in settings.CHANNEL_LAYERS['default']['CONFIG']['hosts']]"
    return list(project_settings(hosts, **env))
