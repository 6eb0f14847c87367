"""Admission control against a real Daphne: past ADMISSION_LIMIT connects in progress
(upgraded, not through their handshake), negotiate answers 503 with Retry-After at once,
counted and logged; once the handshakes are answered (or the sockets go), it admits
again."""

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.api_client import http_get, sample
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.wire import RS, hub_socket, negotiate, records
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
LIMIT = 2


@pytest.fixture
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, admission_limit=LIMIT)
    yield server
    server.kill()


def shed(server: DaphneProcess) -> float:
    text = http_get(f"{server.http}/metrics")[1]
    return sample(text, "messenger_realtime_hub_connects_shed_total")


def test_negotiate_is_shed_with_retry_after_past_the_connects_in_progress(
    daphne: DaphneProcess,
) -> None:
    user = UserFactory()
    token = token_for(user.id)
    assert negotiate(daphne, token)[0] == 200
    sockets = contextlib.ExitStack()

    def upgrade() -> Any:
        connection_token = negotiate(daphne, token)[1]["connectionToken"]
        return sockets.enter_context(hub_socket(daphne, token, f"?id={connection_token}"))

    # LIMIT upgrades that have not sent their handshake: LIMIT connects in progress.
    with sockets:
        pending = [upgrade() for _ in range(LIMIT)]
        run_checks(daphne, token, pending, upgrade)


def run_checks(daphne: DaphneProcess, token: str, pending: list[Any], upgrade: Any) -> None:
    status, body, headers = negotiate(daphne, token)
    assert status == 503
    assert headers["Retry-After"] == "2"
    assert body == {"error": "Service unavailable: too many connects in progress"}
    assert shed(daphne) == 1
    line = daphne.wait_for("hub connects shed")
    assert "in_progress=2" in line and "limit=2" in line and "shed=1" in line, line
    # One handshake answered: one connect less in progress, and negotiate admits again.
    pending[0].send(json.dumps({"protocol": "json", "version": 1}) + RS)
    assert records(pending[0]) == [{}]
    assert negotiate(daphne, token)[0] == 200
    # A socket that goes before its handshake stops counting too.
    pending[1].close()
    daphne.wait_for("hub disconnected")  # its end has run: the count is down
    upgrade()  # one in progress again
    assert negotiate(daphne, token)[0] == 200
    assert shed(daphne) == 1  # nothing else was shed
