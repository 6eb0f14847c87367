"""Processes handed on from test to test while isolation allows (issue 47).

Starting Daphne and the worker for every end-to-end test cost more than many of the tests
themselves. A fixture that may share its processes asks `SharedProcesses.get` for them
under a key that fixes how they are started (their environment and settings, and the
module for a module's own): the next test that asks the same fixture for the same key gets
the same processes, ready for it, and anything else ends them. Ready means: every process
still runs; the test sees only the lines they log from then on (each Daphne's access log
marks where: a fence request); with `settle`, for tests that count a process's connections,
no connection of an earlier test is still open there.

Never shared:
- the processes of a test marked `own_processes` (it kills, restarts or reconfigures them,
  or asserts on them from a clean start): it gets its own, started for it, ended after it;
- a worker behind a test that did not ask for it: held processes with a worker end before
  any other test starts (the worker would claim that test's rows and hold the dispatch
  lease). A Daphne alone, like a module-scoped one, may wait behind its module's other
  tests; it ends when a test of another module starts, or at the end of the session.

Between tests pytest-django empties the tables and the autouse fixture in tests/conftest.py
the outbox; the lease row of a held worker stays (`lease_holders`): without it the worker
would lose its lease at its next heartbeat and go through a reconnect in the next test.
"""

import socket
import uuid
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from tests.support.api_client import http_get, sample
from tests.support.hub_clients import Hub, TwoHubs
from tests.support.runtime import wait_until
from tests.support.workers import DaphneProcess, LoggedProcess, WorkerProcess

T = TypeVar("T")
OWN = "own_processes"  # the marker (pyproject.toml)
SETTLE_TIMEOUT = 10.0  # a connection closed by the test before ends in milliseconds


def processes(value: Any) -> list[LoggedProcess]:
    """The processes a fixture's value holds (a Hub, TwoHubs, a process or a list)."""
    if isinstance(value, LoggedProcess):
        return [value]
    if isinstance(value, Hub):
        return [value.worker, value.daphne]
    if isinstance(value, TwoHubs):
        return [value.worker, *value.daphnes]
    if isinstance(value, list | tuple):
        return [process for one in value for process in processes(one)]
    raise TypeError(f"no processes in {value!r}")


def end(value: Any) -> None:
    for process in processes(value):
        process.kill()


def own_processes(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(OWN) is not None


def env_key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(env.items()))


def open_connections(daphne: DaphneProcess) -> float | None:
    """The process's open hub connections (its own /metrics); None if it does not answer."""
    status, text = http_get(f"{daphne.http}/metrics", timeout=2)
    return sample(text, "messenger_realtime_hub_connections") if status == 200 else None


@dataclass
class Held:
    key: Hashable
    module: str
    value: Any

    def has_worker(self) -> bool:
        return any(isinstance(p, WorkerProcess) for p in processes(self.value))


class SharedProcesses:
    """The processes held between tests, by the name of the fixture that started them.
    One per session (tests/conftest.py), found in the config's stash under SHARED."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}

    def get(
        self,
        request: pytest.FixtureRequest,
        key: Hashable,
        start: Callable[[], T],
        settle: bool = False,
    ) -> T:
        """The processes held for this fixture and key, ready for this test; else new ones
        started (and held) in their place."""
        name = request.fixturename
        assert name is not None
        held = self._held.get(name)
        if held is not None:
            if held.key == key and self._ready(held.value, settle):
                return held.value  # type: ignore[no-any-return]
            self._end(name)
        value = start()
        self._held[name] = Held(key, request.module.__name__, value)
        return value

    def before_test(self, request: pytest.FixtureRequest) -> None:
        """End what must not run behind this test (called before its own fixtures)."""
        own = own_processes(request)
        for name, held in list(self._held.items()):
            if name in request.fixturenames:
                keep = not own  # an own_processes test gets its own instead
            else:
                keep = not held.has_worker() and held.module == request.module.__name__
            if not keep:
                self._end(name)

    def lease_holders(self) -> list[str]:
        """The dispatch lease's `holder` (host:pid) of each held worker."""
        host = socket.gethostname()
        return [
            f"{host}:{process.proc.pid}"[:255]
            for held in self._held.values()
            for process in processes(held.value)
            if isinstance(process, WorkerProcess)
        ]

    def end_all(self) -> None:
        for name in list(self._held):
            self._end(name)

    def _end(self, name: str) -> None:
        end(self._held.pop(name).value)

    def _ready(self, value: Any, settle: bool) -> bool:
        held = processes(value)
        if any(process.proc.poll() is not None for process in held):
            return False  # one died (or a test ended it): start afresh
        daphnes = [p for p in held if isinstance(p, DaphneProcess)]

        def settled() -> bool:
            return all(open_connections(daphne) == 0 for daphne in daphnes)

        if settle:
            try:
                wait_until(settled, SETTLE_TIMEOUT, "the connections of the test before to end")
            except AssertionError:
                return False  # still open (waiting for a resume, say): start afresh
        for process in held:
            if isinstance(process, DaphneProcess):
                # Logged after everything the process logged before it answered.
                fence = uuid.uuid4().hex
                if http_get(f"{process.http}/health/live?fence={fence}")[0] != 200:
                    return False
                try:
                    process.forget_lines(through=fence)
                except AssertionError:
                    return False  # no access log line for it: start afresh
            else:
                process.forget_lines()
        return True


SHARED = pytest.StashKey[SharedProcesses]()


def shared(
    request: pytest.FixtureRequest,
    key: Hashable,
    start: Callable[[], T],
    settle: bool = False,
) -> Iterator[T]:
    """A fixture's processes: shared under `key` (see the module's docstring), or the
    test's own when it is marked own_processes. Use as `yield from shared(...)`."""
    if own_processes(request):
        value = start()
        try:
            yield value
        finally:
            end(value)
        return
    registry: SharedProcesses = request.getfixturevalue("shared_processes")
    yield registry.get(request, key, start, settle)


def shared_in_module(
    request: pytest.FixtureRequest, start: Callable[[], T], *key: Hashable, settle: bool = True
) -> Iterator[T]:
    """`shared` for a module's own fixture: never handed to another module's tests."""
    return shared(request, (request.module.__name__, *key), start, settle)
