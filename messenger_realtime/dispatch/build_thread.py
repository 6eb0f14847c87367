"""Building a batch's events from the domain: off the event loop, with a deadline.

The domain read runs on a thread of the builder's own (never the thread Django's
sync_to_async shares with everything else), bounded by BUILD_TIMEOUT. A read that does not
return in time is abandoned with its thread (Python cannot stop a thread): the builder
moves on with a fresh one, so one stuck read never stops dispatch. A batch whose build
failed or timed out is isolated: each of its rows is retried alone, at once, so only the
row that broke the build pays for it. A time-critical row older than its delivery
deadline is decided before any read: it expires instead of being pushed.
"""

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from django.db import close_old_connections, connections

from messenger_realtime.contracts.build import build_events
from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.dispatch.rows import Fate, RowOutcome
from messenger_realtime.exceptions import InvalidRow, UnencodablePayload, describe_error
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)

HEALTH_CHECK_EVERY = 1.0  # seconds between checks of the build thread's Django connection
BUILD_TIMEOUT_ERROR = "BuildTimeout: the domain read did not return within BUILD_TIMEOUT"


class Builder:
    """Builds batches on a thread of its own, each read bounded by `timeout` seconds."""

    def __init__(self, port: DomainPort, timeout: float, deadlines: Mapping[str, float]) -> None:
        self.port = port
        self.timeout = timeout
        self.deadlines = dict(deadlines)
        self.abandoned = 0  # threads left behind on a read that never returned
        self._thread = BuildThread()
        self._checked_at = float("-inf")  # the connection's last health check (monotonic)

    async def build(self, outcomes: list[RowOutcome]) -> None:
        """Give each undecided row its event, or decide it (expired, invalid, failed)."""
        self._expire(outcomes)
        todo = [o for o in outcomes if o.undecided]
        if not todo:
            return
        # Django's health check (a SELECT 1 round trip) once a second, not once a batch, and
        # always after a failed read: a broken connection is replaced before the next one.
        check = time.monotonic() - self._checked_at >= HEALTH_CHECK_EVERY
        try:
            with metrics.build_duration.time():
                read = self._thread.run(_read, todo, self.port, check)
                if check:
                    self._checked_at = time.monotonic()
                built = await asyncio.wait_for(read, self.timeout)
        except TimeoutError:
            self._abandon_thread()
            self._isolate(todo, BUILD_TIMEOUT_ERROR)
            return
        except Exception as exc:
            self._checked_at = float("-inf")
            self._isolate(todo, describe_error(exc), permanent=unreadable(exc))
            return
        for outcome, event in zip(todo, built, strict=True):
            if isinstance(event, InvalidRow):
                outcome.decide(Fate.QUARANTINE, str(event)[:512])
            else:
                outcome.event = event

    async def close(self) -> None:
        """Close the build thread's database connection (the thread stays for reuse)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._thread.run(connections.close_all), self.timeout)

    def _expire(self, outcomes: list[RowOutcome]) -> None:
        for outcome in outcomes:
            deadline = self.deadlines.get(outcome.row.kind)
            if outcome.undecided and deadline is not None and outcome.row.age > deadline:
                error = f"Expired: {outcome.row.kind} older than {deadline:g} s, not pushed"
                outcome.decide(Fate.EXPIRE, error)

    def _isolate(self, todo: list[RowOutcome], error: str, permanent: str | None = None) -> None:
        """A failed build: every row becomes a suspect, retried alone (at once when it was
        one of several, after its backoff when it was already alone). A row that failed
        alone for a `permanent` reason (its own data cannot be read) is quarantined."""
        logger.warning(
            "payload build failed",
            extra={"action": "build", "rows": len(todo), Field.ERROR_CODE: error},
        )
        for outcome in todo:
            if len(todo) > 1:
                outcome.decide(Fate.ISOLATE, error)
            elif permanent is not None:
                outcome.decide(Fate.QUARANTINE, permanent)
            else:
                outcome.suspect = True
                outcome.decide(Fate.RETRY, error)

    def _abandon_thread(self) -> None:
        self.abandoned += 1
        metrics.build_timeouts.inc()
        stuck, self._thread = self._thread, BuildThread()
        stuck.retire()  # it ends after its stuck read returns, if it ever does


class BuildThread:
    """One daemon thread running build jobs in turn, keeping its Django connection between
    them. Daemon: a read stuck for ever cannot keep the process from exiting."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="realtime-build", daemon=True).start()

    def run(self, fn: Callable[..., Any], *args: Any) -> "asyncio.Future[Any]":
        """Run fn(*args) on the thread; the future resolves on the calling loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((loop, future, fn, args))
        return future

    def retire(self) -> None:
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, fn, args = job
            try:
                result, error = fn(*args), None
            except Exception as exc:
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_settle, future, result, error)
        connections.close_all()


def _settle(future: "asyncio.Future[Any]", result: Any, error: Exception | None) -> None:
    if future.done():  # timed out and cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def unreadable(exc: BaseException) -> str | None:
    """The permanent error of a domain read that failed on the data itself, else None
    (a transient failure: the connection, a timeout, a bug worth retrying after a fix).
    Nested JSON past Python's recursion limit (a jsonb column written before the API
    bounded nesting) is the one such failure a read can meet."""
    if isinstance(exc, RecursionError):
        return str(UnencodablePayload("nested too deeply to read (RecursionError)"))
    return None


def _read(outcomes: list[RowOutcome], port: DomainPort, check: bool) -> list[Any]:
    if check:
        close_old_connections()  # a long-lived worker must not reuse a broken connection
    return build_events([o.row for o in outcomes], port)
