"""The app applies its Daphne integration itself: a host whose ASGI module is only
`with_hub(get_asgi_application())` gets the tokens scrubbed from Daphne's access log, the
listen backlog a reconnect storm needs and the polite Close at shutdown, without calling
anything else."""

import signal
from collections.abc import Iterator

import pytest

from messenger_realtime.hub.daphne.capacity import LISTEN_BACKLOG
from tests.support.api_client import http_get
from tests.support.runtime import listen_backlog, somaxconn
from tests.support.workers import DaphneProcess

SECRET = "eyJhbGciOiJIUzI1NiJ9.a-token-that-must-not-be-logged.c2lnbmF0dXJl"


@pytest.fixture
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, application="tests.support.bare_asgi:application")
    yield server
    server.kill()


def test_a_token_in_the_query_is_redacted_from_daphne_s_access_log(
    daphne: DaphneProcess,
) -> None:
    status, _ = http_get(f"{daphne.http}/hubs/messenger?id=abc&access_token={SECRET}")
    assert 400 <= status < 500  # no such connection
    daphne.wait_for(r'"GET /hubs/messenger\?id=\[redacted\]&access_token=\[redacted\]" 4\d\d')
    assert not any(SECRET in line for line in daphne.lines)


def test_daphne_listens_with_the_storm_backlog_and_closes_politely(
    daphne: DaphneProcess,
) -> None:
    assert listen_backlog(daphne.port) == min(LISTEN_BACKLOG, somaxconn())
    daphne.signal(signal.SIGTERM)
    assert daphne.wait() == 0
    assert any("hub shutdown" in line for line in daphne.lines)
