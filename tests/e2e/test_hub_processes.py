"""Several hub processes behind a balancer: a stateful reconnect's resume finds its
connection only in the process that holds it. Routed by `id` (docs/hub.md) it resumes;
routed elsewhere it is refused cleanly and the official client starts afresh."""

from typing import Any

import pytest

from project.messenger import services
from tests.support.balancer import Balancer
from tests.support.factories import UserFactory
from tests.support.hub_clients import HubClient, TwoHubs
from tests.support.hub_helpers import token_for
from tests.support.runtime import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


def connect(hubs: TwoHubs, balancer: Balancer, user: Any, **options: Any) -> HubClient:
    url = f"{balancer.url}/hubs/messenger"
    client = HubClient("@microsoft/signalr", url, token_for(user.id), hubs.env, options)
    client.next("state", "connected")
    return client


def bodies(client: HubClient) -> list[str]:
    events = client.outputs("event")
    return [e["payload"]["body"] for e in events if e["event"] == "message_received"]


def test_routed_by_id_a_stateful_resume_finds_its_connection_in_its_process(
    hubs: TwoHubs,
) -> None:
    balancer = Balancer([d.port for d in hubs.daphnes], sticky=True)
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = connect(hubs, balancer, bob, stateful=True)
    try:
        services.post_message(alice.id, chat.id, "one")
        assert client.message()["body"] == "one"
        holder = hubs.holding(bob)
        balancer.drop()
        services.post_message(alice.id, chat.id, "two")
        hubs.daphnes[holder].wait_for(f"hub connection resumed.*UserId={bob.id}")
        services.post_message(alice.id, chat.id, "three")
        wait_until(lambda: len(bodies(client)) >= 3, what="three messages")
        assert bodies(client) == ["one", "two", "three"]
        assert [o["state"] for o in client.outputs("state")] == ["connected"]
        websockets = [r.backend for r in balancer.routed if r.kind == "websocket"]
        assert websockets == [holder, holder]  # the connection, then its resume
    finally:
        client.kill()
        balancer.close()


def test_routed_elsewhere_a_resume_is_refused_and_the_client_starts_afresh(
    hubs: TwoHubs,
) -> None:
    balancer = Balancer([d.port for d in hubs.daphnes], sticky=False)  # round robin
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = connect(hubs, balancer, bob, stateful=True)
    try:
        holder = hubs.holding(bob)
        balancer.drop()
        client.next("state", "reconnecting", timeout=15)
        client.next("state", "reconnected", timeout=15)
        other = 1 - holder
        line = hubs.daphnes[other].wait_for("hub connection refused")
        assert "already used" in line  # the token's connection lives in the other process
        services.post_message(alice.id, chat.id, "after")
        assert client.message()["body"] == "after"
        websockets = [r.backend for r in balancer.routed if r.kind == "websocket"]
        assert websockets[:2] == [holder, other]  # the connection, then the refused resume
    finally:
        client.kill()
        balancer.close()


@pytest.mark.parametrize("transport", ["ServerSentEvents", "LongPolling"])
def test_routed_by_id_every_request_of_a_connection_reaches_its_process(
    hubs: TwoHubs, transport: str
) -> None:
    balancer = Balancer([d.port for d in hubs.daphnes], sticky=True)
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = connect(hubs, balancer, bob, transport=transport)
    try:
        services.post_message(alice.id, chat.id, "one")
        assert client.message()["body"] == "one"
        assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
        holder = hubs.holding(bob)
        hub_requests = [r for r in balancer.routed if r.path == "/hubs/messenger"]
        assert len(hub_requests) >= 3  # the stream or polls, the handshake, the invocation
        assert {r.backend for r in hub_requests} == {holder}
    finally:
        client.kill()
        balancer.close()


def test_routed_elsewhere_a_poll_or_send_of_a_long_polling_connection_is_404(
    hubs: TwoHubs,
) -> None:
    balancer = Balancer([d.port for d in hubs.daphnes], sticky=False)  # round robin
    bob = UserFactory()
    url = f"{balancer.url}/hubs/messenger"
    options = {"transport": "LongPolling"}
    client = HubClient("@microsoft/signalr", url, token_for(bob.id), hubs.env, options)
    try:
        failed = client.next("state", "failed", timeout=30)
        assert "404" in failed["error"]  # a request of it reached the other process
        polls = [r.backend for r in balancer.routed if r.path == "/hubs/messenger"]
        assert polls[:2] == [1, 0]  # the first poll opened it on 1; the next request went to 0
        hubs.daphnes[0].wait_for(r'"(GET|POST) /hubs/messenger\?id=\[redacted\][^"]*" 404')
    finally:
        client.kill()
        balancer.close()
