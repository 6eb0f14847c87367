"""Dedicated psycopg connections for the worker, built from Django's DATABASES entry.

The worker does not use Django's connection for its hot path: it needs an autocommit
session of its own for the advisory lock and LISTEN (which is also why it must reach
PostgreSQL directly or through a *session*-pooling PgBouncer, never transaction pooling).

Silence is a fault (docs/reliability.md): every connection the worker opens, its own and
Django's, carries libpq's keepalives and tcp_user_timeout within NETWORK_TIMEOUT (on a
real network the kernel then ends a flow that went silent), and a connect_timeout. Its
own connections (BoundedConnection) also give every reply NETWORK_TIMEOUT at most: a
statement still unanswered then drops the connection with an OperationalError, which the
dispatcher takes as any lost session (reconnect, take the lease back, LISTEN again). That
bound holds whatever the kernel does; the keepalives alone do not when a middlebox
acknowledges for a peer that is gone.
"""

import asyncio
from typing import Any

import psycopg
from django.db import connections
from psycopg import pq, waiting
from psycopg.abc import PQGen
from psycopg.conninfo import make_conninfo

from messenger_realtime.conf.settings import network_timeout
from messenger_realtime.ops.network import POSTGRESQL, WAITS

# libpq parameters that may sit in DATABASES[...]["OPTIONS"] and mean the same to psycopg.
APPLICATION = "messenger-realtime-dispatch"  # the worker sessions' application_name
# target_session_attrs: with several hosts (host=a,b: a primary and its standbys), only a
# read-write session will do; the worker's claims and lease are writes.
_LIBPQ_OPTIONS = {"sslmode", "sslrootcert", "sslcert", "sslkey", "options", "connect_timeout"}
_LIBPQ_OPTIONS |= {"target_session_attrs", "load_balance_hosts"}


def keepalives(timeout: float) -> dict[str, int]:
    """libpq's parameters that end a silent flow within `timeout` seconds on a real
    network: an idle connection is probed after a third of it, twice a third apart, and
    data unacknowledged for all of it ends the connection (tcp_user_timeout, ms); a
    connect gets as long."""
    step = max(1, int(timeout // 3))
    return {
        "keepalives": 1,
        "keepalives_idle": step,
        "keepalives_interval": step,
        "keepalives_count": 2,
        "tcp_user_timeout": int(timeout * 1000),
        "connect_timeout": max(2, int(timeout)),
    }


def conninfo(alias: str = "default", **extra: Any) -> str:
    """A libpq connection string for a Django database alias (its test name under tests)."""
    settings_dict = connections[alias].settings_dict
    params: dict[str, Any] = {
        "dbname": settings_dict["NAME"],
        "user": settings_dict.get("USER"),
        "password": settings_dict.get("PASSWORD"),
        "host": settings_dict.get("HOST"),
        "port": settings_dict.get("PORT"),
        "application_name": APPLICATION,
        **keepalives(network_timeout()),
    }
    options = settings_dict.get("OPTIONS", {})
    params.update({k: v for k, v in options.items() if k in _LIBPQ_OPTIONS})
    params.update(extra)
    return make_conninfo(**{k: v for k, v in params.items() if v not in (None, "")})


class BoundedConnection(psycopg.AsyncConnection[Any]):
    """An async connection whose every wait for the server is bounded by NETWORK_TIMEOUT.

    psycopg waits for a reply as long as the socket stays open, and a silent flow keeps
    it open for ever. Here a wait that runs past network_timeout finishes the connection
    (its protocol state is unknown mid-reply) and raises OperationalError. Waits the
    caller bounds itself (notifies(timeout=...): the idle LISTEN wait) are left as asked.
    A statement whose caller gives up on it (a task cancelled: a failed sibling, a stop)
    finishes the connection too: psycopg would cancel it in the server and then wait up to
    5 s more for its end on the same, maybe silent, connection.
    """

    network_timeout: float = 10.0  # set by connect() from NETWORK_TIMEOUT

    async def wait(
        self, gen: PQGen[Any], interval: float = 0.1, timeout: float | None = None
    ) -> Any:
        bounded = timeout is None
        limit = self.network_timeout if timeout is None else timeout
        try:
            with WAITS.waiting(POSTGRESQL, self.network_timeout, 0.0 if bounded else limit):
                return await waiting.wait_async(gen, self.pgconn.socket, interval, limit)
        except psycopg.errors._WaitTimeout:
            if not bounded:
                raise  # the caller's own timeout (notifies() handles it)
            WAITS.timed_out(POSTGRESQL)
            self.pgconn.finish()  # never used again: a reply may still be on its way
            raise psycopg.OperationalError(
                f"no reply from the server within NETWORK_TIMEOUT "
                f"({self.network_timeout:g} s): the connection was dropped"
            ) from None
        except asyncio.CancelledError:
            if self.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                self.pgconn.finish()
            raise


async def connect(alias: str = "default", **extra: Any) -> BoundedConnection:
    """A new autocommit async connection (bounded: BoundedConnection); transactions are
    opened explicitly."""
    conn = await BoundedConnection.connect(conninfo(alias, **extra), autocommit=True)
    conn.network_timeout = network_timeout()
    return conn


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
    # A read on a silent flow: the build thread abandons it at BUILD_TIMEOUT, and the
    # kernel ends its connection within NETWORK_TIMEOUT (so the thread ends too).
    options = {**keepalives(network_timeout()), **options}
    if statement_timeout:
        timeout = f"-c statement_timeout={int(statement_timeout * 1000)}"
        options["options"] = f"{options.get('options', '')} {timeout}".strip()
    settings_dict["OPTIONS"] = options
    settings_dict["CONN_MAX_AGE"] = None  # kept; checked before reuse (CONN_HEALTH_CHECKS)
    settings_dict["CONN_HEALTH_CHECKS"] = True
