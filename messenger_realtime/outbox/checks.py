"""E015 for DELIVERY_DEADLINES' kinds: a deadline may name only a kind that may expire
(enums.EXPIRABLE_KINDS). The rule lives beside the kinds because conf/ imports nothing
above it; conf/declared.py keeps the key's row and its other rule (deadlines > 0)."""

from collections.abc import Mapping
from typing import Any

from django.core.checks import Error, register

from messenger_realtime.conf.checks import WORKER_TAG
from messenger_realtime.conf.settings import collect, env_name
from messenger_realtime.outbox.enums import EXPIRABLE_KINDS

KEY = "DELIVERY_DEADLINES"


def expiry_problem(deadlines: Mapping[str, float]) -> str | None:
    """What is wrong with the kinds a DELIVERY_DEADLINES mapping names, or None."""
    unknown = ", ".join(sorted(set(deadlines) - EXPIRABLE_KINDS))
    return f"names kinds that may not expire: {unknown} (only media kinds may)" if unknown else None


@register(WORKER_TAG)
def check_delivery_deadlines(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    values, _ = collect()
    problem = expiry_problem(values.get(KEY) or {})  # missing: it did not parse (E002)
    if problem is None:
        return []
    return [
        Error(
            f"MESSENGER_REALTIME[{KEY!r}] {problem}.",
            hint=f"Fix settings.MESSENGER_REALTIME[{KEY!r}] or ${env_name(KEY)}.",
            id="messenger_realtime.E015",
        )
    ]
