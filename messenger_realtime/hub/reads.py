"""The hub's database reads: off the event loop, several at once.

channels' `database_sync_to_async` is thread-sensitive by default, and outside a Django
request (the hub's negotiate, upgrades and connections are not Django requests) every
thread-sensitive call of the process runs on asgiref's one sync thread, one after
another. The hub's reads need no thread of their own: each borrows a database
connection (from the process's pool) and gives it back (channels closes it around every
call), and none touches state another call left on its thread. On one thread, though,
their round trips queue behind each other: in a reconnect storm that thread, not the
CPU, set how many connects a process admitted per second (docs/performance.md,
"Reconnect storm"). So they run on an executor of their own, and their waits overlap:
half as many threads as the process's pool has connections (DATABASE_POOL_MAX_SIZE;
READ_THREADS without a pool), so the other half stays for the process's Django requests
(the REST resyncs that follow a storm): with every connection taken by hub reads, a
request waited out DATABASE_POOL_TIMEOUT and failed.

`read(func)` is `database_sync_to_async(func)` on that executor.
"""

from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings

P = ParamSpec("P")
R = TypeVar("R")
READ_THREADS = 4  # without a pool: each thread opens its connection per call (or keeps it)

_executor: ThreadPoolExecutor | None = None


def read(func: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """`func` (synchronous, reading the database) as a coroutine function that runs it on
    the hub's read threads."""
    call: Callable[P, Coroutine[Any, Any, R]] = database_sync_to_async(
        func, thread_sensitive=False, executor=executor()
    )
    return call


def executor() -> ThreadPoolExecutor:
    """The process's read threads, made at first use (settings are loaded by then)."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(threads(), thread_name_prefix="hub-read")
    return _executor


def threads() -> int:
    """Half the default database's pool (at least one): the rest is the requests'."""
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict) and pool.get("max_size"):
        return max(1, int(pool["max_size"]) // 2)
    return READ_THREADS
