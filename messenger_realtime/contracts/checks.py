"""System check E011: DOMAIN_PORT names an importable DomainPort (both roles read it)."""

from typing import Any

from django.core.checks import Error, register

from messenger_realtime.conf.checks import HUB_TAG, WORKER_TAG
from messenger_realtime.conf.settings import collect, env_name
from messenger_realtime.contracts.port import port_problem


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
