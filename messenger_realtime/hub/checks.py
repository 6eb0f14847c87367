"""W002: the web process's database pool lends connections that bound every reply
(hub/bounded_pool.py); W005: it has a pool at all. Beside the class it asks for: conf/
imports nothing above it."""

from typing import Any

from django.conf import settings
from django.core.checks import Warning, register

from messenger_realtime.conf.checks import HUB_TAG
from messenger_realtime.hub.bounded_pool import BoundedConnection


@register(HUB_TAG)
def check_database_pool(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """W002: the web process's PostgreSQL waits have no bound (hub/bounded_pool.py)."""
    return unbounded_pools(getattr(settings, "DATABASES", {}))


def unbounded_pools(databases: dict[str, Any]) -> list[Warning]:
    warnings = []
    for alias, database in databases.items():
        # Without a pool (behind PgBouncer; every management command here) no class can be
        # given: docs/integration.md says what bounds that case.
        pool = database.get("OPTIONS", {}).get("pool")
        chosen = pool.get("connection_class") if isinstance(pool, dict) else None
        if "postgresql" in database.get("ENGINE", "") and not pool:
            warnings.append(
                Warning(
                    f"DATABASES[{alias!r}] has no pool: the web process's PostgreSQL waits "
                    "have no bound but the kernel's keepalives (minutes), so a silent flow "
                    "(a NAT that forgot it, a failover) holds a Daphne request or a hub read "
                    "that long.",
                    hint=f"Set DATABASES[{alias!r}]['OPTIONS']['pool'] = {{'connection_class': "
                    "messenger_realtime.hub.bounded_pool.BoundedConnection, ...} "
                    "(docs/integration.md, step 3); behind PgBouncer, where no pool is "
                    "right, add 'messenger_realtime.W005' to SILENCED_SYSTEM_CHECKS.",
                    id="messenger_realtime.W005",
                )
            )
            continue
        if not pool or (isinstance(chosen, type) and issubclass(chosen, BoundedConnection)):
            continue
        where = f"DATABASES[{alias!r}]['OPTIONS']['pool']"
        warnings.append(
            Warning(
                f"{where} lends connections that wait for ever on a silent PostgreSQL flow "
                "(a NAT that forgot it, a failover): each holds a Daphne request or a hub "
                "read, until the pool is empty.",
                hint=f"Set {where} = {{'connection_class': "
                "messenger_realtime.hub.bounded_pool.BoundedConnection, ...}: every reply "
                "within NETWORK_TIMEOUT (docs/integration.md, step 3).",
                id="messenger_realtime.W002",
            )
        )
    return warnings
