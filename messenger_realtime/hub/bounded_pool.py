"""The web process's PostgreSQL waits, bounded: the connection class of the host's pool.

Daphne's REST views and the hub's reads (the user's standing and chats at every connect,
a Recover's outbox read) borrow connections from the psycopg pool the host configures in
DATABASES (OPTIONS["pool"]). psycopg waits for a reply as long as the socket stays open,
and a silent flow (a NAT that forgot it, a failover) keeps it open for ever: each read on
it then holds its thread and its pooled connection for good, until the pool is empty and
every request answers 503 after the pool's timeout, and the hub's one read thread, stuck
on its kept connection, accepts no connection at all. Seen in the chaos soak.

BoundedConnection gives every reply NETWORK_TIMEOUT at most, as the worker's connections
have (dispatch/connections.py): past it the connection is finished (its protocol state is
unknown mid-reply) and the statement raises OperationalError, so the request fails with a
clear 503, the hub read is tried once more on a fresh connection (hub/reads.py) and the
pool discards the broken connection and makes another. The wait is entered in
ops/network.py meanwhile, so the process's metrics and /health/live see it.

The host names it in its pool options (docs/integration.md):

    "OPTIONS": {"pool": {"connection_class": BoundedConnection, ...}}

W002 (hub/checks.py) warns when the hub's pool has another class. Without a pool
(behind PgBouncer, CONN_MAX_AGE) Django makes its connections with psycopg.connect and
no class can be given: there the kernel's keepalives are the only bound.
"""

from typing import Any

import psycopg
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict

from messenger_realtime.conf.settings import network_timeout
from messenger_realtime.ops.network import POSTGRESQL, WAITS


class BoundedConnection(psycopg.Connection[Any]):
    """A connection whose every wait for the server is bounded by NETWORK_TIMEOUT (waits
    the caller bounds itself, such as notifies(timeout=...), are left as asked), its
    connect included."""

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> "BoundedConnection":
        """psycopg's connect, each server's attempt given NETWORK_TIMEOUT (at least libpq's
        2 s) unless the conninfo or the pool's kwargs set connect_timeout. psycopg's own
        default is 130 s an attempt: with a multi-host DATABASE_URL (a primary and its
        standbys) whose first server went silent, every new connection of the pool waited
        that long before trying the promoted standby (docs/operations.md, "Failover")."""
        if "connect_timeout" not in kwargs and "connect_timeout" not in conninfo_to_dict(conninfo):
            kwargs["connect_timeout"] = max(2, int(network_timeout()))
        connection: BoundedConnection = super().connect(conninfo, **kwargs)
        return connection

    def wait(self, gen: PQGen[Any], interval: float = 0.1, timeout: float | None = None) -> Any:
        bounded = timeout is None
        bound = network_timeout()
        limit = bound if timeout is None else timeout
        try:
            with WAITS.waiting(POSTGRESQL, bound, 0.0 if bounded else limit):
                return super().wait(gen, interval, limit)
        except psycopg.errors._WaitTimeout:
            if not bounded:
                raise  # the caller's own timeout
            WAITS.timed_out(POSTGRESQL)
            self.pgconn.finish()  # never used again: a reply may still be on its way
            raise psycopg.OperationalError(
                f"no reply from the server within NETWORK_TIMEOUT ({bound:g} s): "
                "the connection was dropped"
            ) from None
