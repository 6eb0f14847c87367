"""Admission control against a real Daphne: past ADMISSION_LIMIT connects in progress
(negotiated, or upgraded and not through their handshake), a negotiate waits in line,
first come first served, and is admitted when a connect ahead of it finishes; a wait
that runs out (ADMISSION_WAIT, 0: none) answers 503 with Retry-After, counted and
logged. An admitted negotiate's slot is held for the connection it granted, which takes
it over when it opens."""

import contextlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from messenger_realtime.hub.daphne.capacity import LISTEN_BACKLOG
from tests.support.api_client import http_get, sample
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.runtime import listen_backlog, somaxconn, wait_until
from tests.support.wire import RS, hub_socket, negotiate, records
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
LIMIT = 2


HANDSHAKE = json.dumps({"protocol": "json", "version": 1}) + RS


@pytest.fixture
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, admission_limit=LIMIT, admission_wait=0)
    yield server
    server.kill()


@pytest.fixture
def patient_daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, admission_limit=LIMIT, admission_wait=30)
    yield server
    server.kill()


def shed(server: DaphneProcess) -> float:
    text = http_get(f"{server.http}/metrics")[1]
    return sample(text, "messenger_realtime_hub_connects_shed_total")


def waiting(server: DaphneProcess) -> float:
    text = http_get(f"{server.http}/metrics")[1]
    return sample(text, "messenger_realtime_hub_connects_waiting")


@contextlib.contextmanager
def in_progress(server: DaphneProcess, token: str) -> Iterator[tuple[list[Any], Any]]:
    """LIMIT upgrades that have not sent their handshake (LIMIT connects in progress),
    and a function that opens the connection a negotiate answer granted (or negotiates
    one first)."""
    sockets = contextlib.ExitStack()

    def upgrade(granted: dict[str, Any] | None = None) -> Any:
        granted = granted or negotiate(server, token)[1]
        query = f"?id={granted['connectionToken']}"
        return sockets.enter_context(hub_socket(server, token, query))

    with sockets:
        yield [upgrade() for _ in range(LIMIT)], upgrade


def test_negotiate_is_shed_with_retry_after_past_the_connects_in_progress(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    token = token_for(user.id)
    with in_progress(daphne, token) as (pending, upgrade):
        run_checks(daphne, token, pending, upgrade)


def test_past_the_limit_a_negotiate_waits_in_line_until_a_connect_finishes(
    patient_daphne: DaphneProcess,
) -> None:
    """The order within the line is unit-tested (test_hub_admission_line.py); here, on
    a real Daphne, a negotiate past the limit is held, not refused, and answered 200 as
    soon as a connect ahead of it finishes, whichever way it finishes."""
    server, token = patient_daphne, token_for(UserFactory().id)
    with in_progress(server, token) as (pending, upgrade), ThreadPoolExecutor(1) as pool:
        held = pool.submit(negotiate, server, token)
        wait_until(lambda: waiting(server) == 1, what="a negotiate in line")
        assert not held.done()
        # One handshake answered: its slot goes to the negotiate in line, and stays
        # held for the connection that negotiate granted until it opens.
        pending[0].send(HANDSHAKE)
        assert records(pending[0]) == [{}]
        status, granted, _ = held.result(timeout=10)
        assert status == 200 and waiting(server) == 0
        held = pool.submit(negotiate, server, token)
        wait_until(lambda: waiting(server) == 1, what="a negotiate behind a held slot")
        upgrade(granted)  # the granted connection opens in its own slot: none frees
        assert waiting(server) == 1 and not held.done()
        # A socket that goes before its handshake hands its slot on too.
        pending[1].close()
        assert held.result(timeout=10)[0] == 200
        assert waiting(server) == 0
    assert shed(server) == 0


def test_a_wait_that_runs_out_is_shed(live_env: dict[str, str]) -> None:
    server = DaphneProcess(live_env, admission_limit=LIMIT, admission_wait=0.5)
    try:
        token = token_for(UserFactory().id)
        with in_progress(server, token):
            started = time.monotonic()
            status, _, headers = negotiate(server, token)
            assert status == 503 and headers["Retry-After"] == "2"
            assert time.monotonic() - started >= 0.5  # it waited its ADMISSION_WAIT first
            assert shed(server) == 1 and waiting(server) == 0
            line = server.wait_for("hub connects shed")
            assert "waiting=0" in line and "limit=2" in line, line
    finally:
        server.kill()


def run_checks(daphne: DaphneProcess, token: str, pending: list[Any], upgrade: Any) -> None:
    status, body, headers = negotiate(daphne, token)
    assert status == 503
    assert headers["Retry-After"] == "2"
    assert body == {"error": "Service unavailable: too many connects in progress"}
    assert shed(daphne) == 1
    line = daphne.wait_for("hub connects shed")
    assert "in_progress=2" in line and "limit=2" in line and "shed=1" in line, line
    # One handshake answered: one connect less in progress, and negotiate admits again
    # (upgrade() negotiates, then opens the connection in the slot its negotiate held).
    pending[0].send(HANDSHAKE)
    assert records(pending[0]) == [{}]
    upgrade()
    # A socket that goes before its handshake stops counting too.
    pending[1].close()
    daphne.wait_for("hub disconnected")  # its end has run: the count is down
    upgrade()  # LIMIT in progress again
    assert shed(daphne) == 1  # nothing else was shed
    assert negotiate(daphne, token)[0] == 503
    assert shed(daphne) == 2


def test_one_user_cannot_hold_more_than_its_share_of_the_slots(live_env: dict[str, str]) -> None:
    # A client that negotiates again and again without opening what it was granted held
    # a slot each for RESERVED_FOR seconds: with ADMISSION_LIMIT of them everyone else
    # waited. Past ADMISSION_PER_USER held slots its negotiate is refused at once.
    server = DaphneProcess(live_env, admission_limit=10, admission_wait=0, admission_per_user=2)
    try:
        greedy, other = UserFactory(), UserFactory()
        token = token_for(greedy.id)
        granted = [negotiate(server, token) for _ in range(2)]
        assert [status for status, _, _ in granted] == [200, 200]
        status, answer, headers = negotiate(server, token)
        assert (status, headers.get("Retry-After")) == (429, "2")
        assert "too many connects in progress for this user" in answer["error"]
        server.wait_for(f"negotiate refused.*UserId={greedy.id}")
        assert negotiate(server, token_for(other.id))[0] == 200  # nobody else held up
        # Opening one of the connections it was granted gives the user a slot back.
        query = f"?id={granted[0][1]['connectionToken']}"
        with hub_socket(server, token, query) as ws:
            ws.send(HANDSHAKE)
            assert records(ws) == [{}]
            assert negotiate(server, token)[0] == 200
    finally:
        server.kill()


def test_daphne_listens_with_a_backlog_a_storm_fits_in(daphne: DaphneProcess) -> None:
    """Twisted listens with a backlog of 50: in a reconnect storm the kernel dropped the
    rest of the burst, and a client whose connection it dropped sat out TCP's
    retransmission backoff up to its request timeout (100 s) before it came back. The
    hub's Daphne listens with LISTEN_BACKLOG, as far as the kernel allows."""
    assert listen_backlog(daphne.port) == min(LISTEN_BACKLOG, somaxconn())
