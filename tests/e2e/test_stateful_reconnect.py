"""Stateful reconnect with the official client (withStatefulReconnect) through a TCP proxy
that cuts its connection while events flow: the real worker and Daphne, the resume, and
the clean refusal past the replay buffer's bytes or its time."""

from collections.abc import Iterator
from typing import Any

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub, HubClient
from tests.support.hub_helpers import token_for
from tests.support.proxy import TcpProxy
from tests.support.runtime import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
STATEFUL = {"stateful": True}


@pytest.fixture
def proxy(hub: Hub) -> Iterator[TcpProxy]:
    server = TcpProxy(hub.daphne.port)
    yield server
    server.close()


@pytest.fixture
def stateful_client(hub: Hub, proxy: TcpProxy) -> Iterator[Any]:
    started: list[HubClient] = []

    def connect(user: Any, **options: Any) -> HubClient:
        url = f"http://127.0.0.1:{proxy.port}/hubs/messenger"
        options = {**STATEFUL, **options}
        client = HubClient("@microsoft/signalr", url, token_for(user.id), hub.env, options)
        started.append(client)
        client.next("state", "connected")
        hub.daphne.wait_for(f"hub connected.*UserId={user.id}.*stateful=True")
        return client

    yield connect
    for client in started:
        client.kill()


def seqs(client: HubClient, chat: Any) -> list[int]:
    events = client.outputs("event")
    return [
        e["payload"]["seq"]
        for e in events
        if e["event"] == "message_received" and e["payload"]["chatId"] == str(chat.id)
    ]


def states(client: HubClient) -> list[str]:
    return [o["state"] for o in client.outputs("state")]


@pytest.mark.parametrize("messagepack", [False, True])
def test_a_cut_connection_resumes_and_every_event_arrives_once_in_order(
    hub: Hub, proxy: TcpProxy, stateful_client: Any, messagepack: bool
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = stateful_client(bob, messagepack=messagepack)
    opened = next(line for line in hub.daphne.lines if "connected ConnectionId" in line)
    assert ("protocol=messagepack" in opened) is messagepack
    for n in range(1, 61):
        services.post_message(alice.id, chat.id, f"m{n}")
        if n in (15, 40):  # while the worker is still pushing the ones before
            wait_until(lambda n=n: len(seqs(client, chat)) >= n - 10, what="events flowing")
            proxy.drop()
    wait_until(lambda: len(seqs(client, chat)) >= 60, timeout=30, what="all 60 events")
    assert seqs(client, chat) == list(range(1, 61))  # once each, in order
    assert states(client) == ["connected"]  # no reconnect, so no REST resync
    resumed = [line for line in hub.daphne.lines if "hub connection resumed" in line]
    assert len(resumed) == 2 and all(f"UserId={bob.id}" in line for line in resumed)
    assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]  # invocations resume too


@pytest.mark.own_processes  # a hub with other settings, started in the test
@pytest.mark.parametrize(
    ("setting", "value", "refusal"),
    [
        ("STATEFUL_RECONNECT_BUFFER_SIZE", "16384", "replay buffer over"),
        ("DISCONNECT_TIMEOUT", "1", "no resume within DISCONNECT_TIMEOUT"),
    ],
)
def test_past_the_buffer_limits_the_resume_is_refused_and_the_client_starts_afresh(
    worker_env: dict[str, str], setting: str, value: str, refusal: str
) -> None:
    hub = Hub(dict(worker_env, **{f"MESSENGER_REALTIME_{setting}": value}))
    proxy = TcpProxy(hub.daphne.port)
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    url = f"http://127.0.0.1:{proxy.port}/hubs/messenger"
    client = HubClient("@microsoft/signalr", url, token_for(bob.id), hub.env, STATEFUL)
    try:
        client.next("state", "connected")
        hub.daphne.wait_for(f"hub connected.*UserId={bob.id}.*stateful=True")
        services.post_message(alice.id, chat.id, "before")
        assert client.message()["seq"] == 1
        proxy.hold()  # the client's resume waits at the proxy...
        proxy.drop()
        wait_until(lambda: proxy.held() == 1, what="the resume attempt, held")
        hub.daphne.wait_for(f"hub connection detached.*UserId={bob.id}")
        for n in range(8):  # ...while the server buffers 8 x 4 kB for it, past 16 kB
            services.post_message(alice.id, chat.id, f"{n}" * 4000)
        pending = RealtimeOutboxEntry.objects.exclude(status="Done")
        line = hub.daphne.wait_for(f"UserId={bob.id}.*reason=.*({refusal})", timeout=30)
        assert "ConnectionId=" in line
        # Every one of the 8 pushed before the resume: none may reach the fresh connection.
        wait_until(lambda: not pending.exists(), what="the 8 events pushed")
        proxy.release()  # now the resume reaches the server: refused
        client.next("state", "reconnecting", timeout=15)
        client.next("state", "reconnected", timeout=15)  # a fresh connection, negotiated
        hub.daphne.wait_for("hub connection refused")
        assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
        services.post_message(alice.id, chat.id, "after")
        assert client.message()["body"] == "after"  # the client resyncs the rest over REST
        assert seqs(client, chat) == [1, 10]
    finally:
        client.kill()
        proxy.close()
        hub.close()


def test_stateful_reconnect_is_granted_only_to_clients_that_ask(hub: Hub, proxy: TcpProxy) -> None:
    user = UserFactory()
    url = f"http://127.0.0.1:{proxy.port}/hubs/messenger"
    plain = HubClient("@microsoft/signalr", url, token_for(user.id), hub.env)
    try:
        plain.next("state", "connected")
        line = hub.daphne.wait_for(f"hub connected.*UserId={user.id}")
        assert "stateful=False" in line
        proxy.drop()  # a plain client reconnects afresh
        plain.next("state", "reconnecting", timeout=15)
        plain.next("state", "reconnected", timeout=15)
    finally:
        plain.kill()


@pytest.mark.own_processes  # it restarts Daphne
def test_a_stateful_connection_held_by_a_stopped_daphne_reconnects_afresh(
    hub: Hub, stateful_client: Any
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = stateful_client(bob)
    hub.restart_daphne()  # Close with allowReconnect first: the resume it prompts is refused
    client.next("state", "reconnecting", timeout=15)
    client.next("state", "reconnected", timeout=30)
    services.post_message(alice.id, chat.id, "after restart")
    assert client.message()["body"] == "after restart"
