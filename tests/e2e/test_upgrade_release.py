"""A WebSocket upgrade hands its TCP transport over to the WebSocket protocol; the HTTP
channel and request it came on must go with it, not stay alive for the connection's
life (hub/daphne/web_request.py). Counted in a real Daphne (tests/support/census), which also
says how the process's collector is set (hub/daphne/capacity.py)."""

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from messenger_realtime.hub.daphne.capacity import FULL_COLLECTION_AFTER, SWITCH_INTERVAL
from tests.support.factories import UserFactory
from tests.support.runtime import wait_until
from tests.support.wire import joined
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
CENSUS = Path(__file__).resolve().parents[1] / "support" / "census"
CONNECTIONS = 20


class Census:
    """Daphne's live objects of a few classes, counted on demand."""

    def __init__(self, server: DaphneProcess, folder: Path) -> None:
        self.server, self.folder, self.taken = server, folder, 0
        self.last: dict[str, int] = {}

    def take(self) -> dict[str, int]:
        os.kill(self.server.proc.pid, signal.SIGUSR1)
        path = self.folder / f"{self.taken}.json"
        self.taken += 1
        wait_until(path.exists, what=f"census {path.name}")
        self.last = json.loads(path.read_text())
        return self.last


@pytest.fixture
def census(live_env: dict[str, str], tmp_path: Path) -> Iterator[Census]:
    """A Daphne with the census loaded, and CONNECTIONS hub connections open on it."""
    path = os.pathsep.join(filter(None, [str(CENSUS), live_env.get("PYTHONPATH")]))
    server = DaphneProcess({**live_env, "PYTHONPATH": path, "HUB_CENSUS": str(tmp_path)})
    try:
        users = [UserFactory() for _ in range(CONNECTIONS)]
        with contextlib.ExitStack() as sockets:
            for user in users:
                sockets.enter_context(joined(server, user))
            yield Census(server, tmp_path)
    finally:
        server.kill()


def test_an_upgraded_connection_holds_no_http_channel_or_request(census: Census) -> None:
    assert census.take()["HubWebSocketProtocol"] == CONNECTIONS  # it sees them
    # Daphne forgets an upgraded request at its next application check (each
    # second); from then on nothing may hold the channel and request.
    released = wait_until(
        lambda: census.take()["HTTPChannel"] < CONNECTIONS // 2,
        timeout=10,
        what="the upgraded connections' HTTP channels released",
    )
    assert released and census.last["HubWebRequest"] < CONNECTIONS // 2, census.last
    assert census.last["HubWebSocketProtocol"] == CONNECTIONS


def test_an_open_hub_connection_keeps_nothing_of_its_opening(census: Census) -> None:
    """Once the handshake is answered, no router frame, scope with headers, Autobahn
    request object or parsed handshake is alive for the connection's life (routing.py,
    daphne/websocket_protocol.py, transports/websocket.py): a third of an idle
    connection's memory."""
    counts = census.take()
    assert counts["HubWebSocketProtocol"] == CONNECTIONS, counts  # it sees them
    assert counts["ConnectionRequest"] == 0, counts
    assert counts["websocket_scopes"] == 0, counts
    assert counts["router_frames"] == 0, counts
    assert counts["handshake_leftovers"] == 0, counts


def test_the_hub_process_runs_full_collections_rarely(census: Census) -> None:
    """A full collection walks every connection the process holds: the hub's Daphne runs
    one after FULL_COLLECTION_AFTER young collections, not CPython's 10 (a fifth of its
    CPU in a reconnect storm); the young generations keep CPython's thresholds."""
    import gc

    young, middle, full = census.take()["gc_threshold"]
    assert full == FULL_COLLECTION_AFTER
    assert (young, middle) == gc.get_threshold()[:2]


def test_the_hub_process_s_threads_take_the_gil_from_a_busy_loop_within_a_millisecond(
    census: Census,
) -> None:
    """REST views and the hub's reads run on threads beside the event loop; at CPython's
    5 ms a flooding user's busy loop doubled a bystander's REST p95 (docs/reliability.md)."""
    assert census.take()["switch_interval"] == SWITCH_INTERVAL == 0.001
