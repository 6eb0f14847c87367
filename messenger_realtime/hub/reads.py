"""The hub's reads of the domain: run on asgiref's one sync thread, on a database
connection that thread keeps between reads; a kind of read that must not wait behind
the connects' reads nor hold them up (a Recover's, a presence change's check) on a
thread of its own (`executor`), on a connection borrowed from the pool for that read and
given back after it (those reads are rare next to the connects': the pool keeps
counting one connection kept by the hub, and each such thread borrows at most one).

Channels' database_sync_to_async closes the thread's connections before and after each
call. With a pool (CONN_MAX_AGE 0) every read then borrowed a connection, checked it
with a round trip (CONN_HEALTH_CHECKS), ran Django's connect() and gave it back: about a
third of the database thread's work per hub connect, which reads twice (the user's
standing at negotiate; the standing and the chats at the upgrade; docs/performance.md).
The hub's reads are short, read-only, in autocommit and made from that one thread, so
the thread keeps the connection it borrowed: one pooled connection per hub process.

What the pool's check gave per borrow is kept per read: a read that fails on a
connection kept from an earlier read (PostgreSQL restarted, the session was ended) is
tried once more on a fresh one, so a restart fails no hub read; a failed connection is
closed (given back: the pool discards a broken one).
"""

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import SyncToAsync
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections

P = ParamSpec("P")
R = TypeVar("R")


def hub_read(
    func: Callable[P, R], executor: ThreadPoolExecutor | None = None
) -> Callable[P, Awaitable[R]]:
    """`func` (synchronous, read-only) as a coroutine function run on the sync thread
    with the kept connection (or on `executor`'s thread, on a borrowed one). Make it
    once (at import), not per call."""

    def on_kept_connection(*args: P.args, **kwargs: P.kwargs) -> R:
        connection = connections[DEFAULT_DB_ALIAS]
        kept = connection.connection is not None
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError):
            connection.close()
            if not kept:
                raise  # a fresh connection failed: the database is the problem
        return func(*args, **kwargs)  # once more, on a fresh connection

    def on_borrowed_connection(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        finally:
            connections[DEFAULT_DB_ALIAS].close()  # back to the pool

    on_kept_connection.__name__ = getattr(func, "__name__", "hub_read")
    on_borrowed_connection.__name__ = on_kept_connection.__name__
    if executor is not None:
        return SyncToAsync(on_borrowed_connection, thread_sensitive=False, executor=executor)
    return SyncToAsync(on_kept_connection, thread_sensitive=True)
