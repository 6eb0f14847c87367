"""Dedicated psycopg connections for the worker, built from Django's DATABASES entry.

The worker does not use Django's connection for its hot path: it needs an autocommit
session of its own for the advisory lock and LISTEN (which is also why it must reach
PostgreSQL directly or through a *session*-pooling PgBouncer, never transaction pooling).
"""

from typing import Any

import psycopg
from django.db import connections
from psycopg.conninfo import make_conninfo

# libpq parameters that may sit in DATABASES[...]["OPTIONS"] and mean the same to psycopg.
APPLICATION = "messenger-realtime-dispatch"  # the worker sessions' application_name
_LIBPQ_OPTIONS = {"sslmode", "sslrootcert", "sslcert", "sslkey", "options", "connect_timeout"}


def conninfo(alias: str = "default", **extra: Any) -> str:
    """A libpq connection string for a Django database alias (its test name under tests)."""
    settings_dict = connections[alias].settings_dict
    params = {
        "dbname": settings_dict["NAME"],
        "user": settings_dict.get("USER"),
        "password": settings_dict.get("PASSWORD"),
        "host": settings_dict.get("HOST"),
        "port": settings_dict.get("PORT"),
        "application_name": APPLICATION,
    }
    options = settings_dict.get("OPTIONS", {})
    params.update({k: v for k, v in options.items() if k in _LIBPQ_OPTIONS})
    params.update(extra)
    return make_conninfo(**{k: v for k, v in params.items() if v not in (None, "")})


async def connect(alias: str = "default", **extra: Any) -> psycopg.AsyncConnection[Any]:
    """A new autocommit async connection; transactions are opened explicitly."""
    return await psycopg.AsyncConnection.connect(conninfo(alias, **extra), autocommit=True)


def dedicate_django_connection(
    alias: str = "default", statement_timeout: float | None = None
) -> None:
    """Make the worker's Django connection (its domain reads) one persistent session.

    A host may give its web processes a connection pool (OPTIONS["pool"]); the worker
    reads from one thread, so a pool only adds sessions. Called before the first query.
    statement_timeout (seconds, the worker's BUILD_TIMEOUT): a domain read that hangs
    (a lock, a runaway plan) is ended by PostgreSQL too, so the build thread the worker
    abandoned at its deadline returns and gives its session back, instead of holding
    one more session per timeout until the database runs out of connections.
    """
    wrapper = connections[alias]
    wrapper.close()
    settings_dict = wrapper.settings_dict
    if settings_dict.get("OPTIONS", {}).get("pool"):
        # PostgreSQL's wrapper has close_pool(); the base class does not declare it.
        wrapper.close_pool()  # type: ignore[attr-defined]
    options = {k: v for k, v in settings_dict.get("OPTIONS", {}).items() if k != "pool"}
    options["application_name"] = "messenger-realtime-dispatch"
    if statement_timeout:
        timeout = f"-c statement_timeout={int(statement_timeout * 1000)}"
        options["options"] = f"{options.get('options', '')} {timeout}".strip()
    settings_dict["OPTIONS"] = options
    settings_dict["CONN_MAX_AGE"] = None  # kept; checked before reuse (CONN_HEALTH_CHECKS)
    settings_dict["CONN_HEALTH_CHECKS"] = True
