"""Channel-layer overruns are never silent: every connection that lost an event is closed
with allowReconnect, the others keep everything, and the metric counts lost messages.

Real worker, Daphne, Redis and PostgreSQL; a raw client and the official client lose
events, a raw client of another chat on the same Daphne process does not. Daphne is
paused (SIGSTOP) during the burst so the drops are exactly predictable: its queue takes
CHANNEL_CAPACITY messages, one per event (the process, not each connection, is in the
chat's group: hub/fanout.py), and drops the rest. (A Redis of the test's own:
the clients' official-client token and the test's own fast-path messages do not touch it.)
"""

import signal
from collections.abc import Iterator

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from project.messenger import services
from tests.support.api_client import http_get, sample
from tests.support.factories import UserFactory
from tests.support.hub_clients import HubClient
from tests.support.hub_helpers import token_for
from tests.support.runtime import PrivateRedis, free_port, wait_until
from tests.support.wire import invoke, joined, records, until_closed
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
CAPACITY = 150
QUIET, FLOOD = 5, 300  # events of the quiet chat first, then of the flooded chat
OVERRUNS = "messenger_realtime_channel_overruns_total"


@pytest.fixture
def capped_env(worker_env: dict[str, str], private_redis: PrivateRedis) -> dict[str, str]:
    """A Redis of this test's own, so it can see who is blocked in it."""
    return dict(worker_env, CHANNEL_CAPACITY=str(CAPACITY), REDIS_URL=private_redis.url)


def pause(daphne: DaphneProcess, redis_server: PrivateRedis) -> None:
    """Stop Daphne, and end the receive it left parked in Redis (BZMPOP) as a timeout
    would: Redis would otherwise hand the stopped process the first message of the burst."""
    daphne.signal(signal.SIGSTOP)
    client = redis_server.client()
    for blocked in (c for c in client.client_list() if c["cmd"] in ("bzmpop", "bzpopmin")):
        client.client_unblock(int(blocked["id"]))


@pytest.fixture
def worker(capped_env: dict[str, str]) -> Iterator[tuple[WorkerProcess, str]]:
    port = free_port()
    process = WorkerProcess(capped_env, polling_interval=0.2, metrics_port=port)
    yield process, f"http://127.0.0.1:{port}/metrics"
    process.kill()


@pytest.fixture
def daphne(capped_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(capped_env)
    yield server
    server.signal(signal.SIGCONT)  # never leave it stopped
    server.kill()


def all_done() -> bool:
    return not RealtimeOutboxEntry.objects.exclude(status="Done").exists()


def test_every_connection_that_lost_events_is_closed_and_the_others_receive_everything(
    worker: tuple[WorkerProcess, str],
    daphne: DaphneProcess,
    capped_env: dict[str, str],
    private_redis: PrivateRedis,
) -> None:
    _, metrics_url = worker
    alice, bob, carol, dave = (UserFactory(name=n) for n in ("alice", "bob", "carol", "dave"))
    flooded = services.create_chat(alice.id, [bob.id, carol.id], title="flooded")
    quiet = services.create_chat(alice.id, [dave.id], title="quiet")
    wait_until(all_done, what="the chats' ChatUpdated rows pushed")
    url = f"{daphne.http}/hubs/messenger"
    official = HubClient("@microsoft/signalr", url, token_for(carol.id), capped_env)
    try:
        official.next("state", "connected")
        with joined(daphne, bob) as bobs, joined(daphne, dave) as daves:
            for ws in (bobs, daves):  # both past their handshake and in their chats' groups
                invoke(ws, "GetGroups")
                assert records(ws)[0]["type"] == 3
            before = sample(http_get(metrics_url)[1], OVERRUNS)
            pause(daphne, private_redis)
            for n in range(QUIET):
                services.post_message(alice.id, quiet.id, f"quiet {n}")
            for n in range(FLOOD):
                services.post_message(alice.id, flooded.id, f"flood {n}")
            wait_until(all_done, timeout=60, what="every row pushed while Daphne is paused")
            # One message per event for this Daphne process: the first CAPACITY are queued,
            # each later one is lost once (for both of the flooded chat's connections).
            lost = QUIET + FLOOD - CAPACITY
            # Counted before the rows were marked Done.
            assert sample(http_get(metrics_url)[1], OVERRUNS) - before == lost
            daphne.signal(signal.SIGCONT)

            bob_seen = until_closed(bobs, timeout=20)
            assert bob_seen[-1] == {"type": 7, "allowReconnect": True}
            bob_bodies = [r["arguments"][0]["body"] for r in bob_seen if r.get("type") == 1]
            assert len(bob_bodies) < FLOOD
            official.next("state", "reconnecting", timeout=15)
            official.next("state", "reconnected", timeout=15)

            quiet_bodies = []
            while len(quiet_bodies) < QUIET:
                for record in records(daves):
                    if record.get("target") == "message_received":
                        quiet_bodies.append(record["arguments"][0]["body"])
            assert quiet_bodies == [f"quiet {n}" for n in range(QUIET)]
            invoke(daves, "GetGroups")  # dave lost nothing: still open, still served
            assert records(daves)[0]["result"] == [f"user:{dave.id}", f"chat:{quiet.id}"]

        def closes() -> dict[str, str]:  # the two closes are logged in either order
            return {
                str(u.id): line
                for line in list(daphne.lines)
                for u in (bob, carol)
                if "hub connection closed" in line and str(u.id) in line
            }

        wait_until(lambda: len(closes()) == 2, what="both overrun closes logged")
        for line in closes().values():
            assert "reason=events dropped" in line and "ConnectionId=" in line
        assert not any(
            "hub connection closed" in line and str(dave.id) in line for line in daphne.lines
        )
    finally:
        official.kill()
