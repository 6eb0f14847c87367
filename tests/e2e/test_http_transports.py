"""Server-Sent Events and long polling with the official client forced to each: it connects,
receives events, invokes GetGroups, survives a hub restart and a token expiry with its
automatic reconnect, and loses a chat when removed from it; MessagePack over long
polling too. Real worker and Daphne."""

from typing import Any

import pytest

from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub, HubClient
from tests.support.hub_helpers import token_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
CASES = [
    ("ServerSentEvents", False, "ServerSentEventsTransport"),
    ("LongPolling", False, "LongPollingTransport"),
    ("LongPolling", True, "LongPollingTransport"),
]


def client_for(hub: Hub, user: Any, transport: str, messagepack: bool, **kw: Any) -> HubClient:
    options = {"transport": transport, "messagepack": messagepack}
    token = kw.get("token") or token_for(user.id)
    client = HubClient("@microsoft/signalr", hub.url, token, hub.env, options)
    client.next("state", "connected")
    return client


@pytest.mark.own_processes  # it restarts Daphne
@pytest.mark.parametrize(("transport", "messagepack", "name"), CASES)
def test_the_official_client_on_each_transport_receives_invokes_and_survives_a_restart(
    hub: Hub, transport: str, messagepack: bool, name: str
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = client_for(hub, bob, transport, messagepack)
    try:
        assert client.outputs("state")[0]["transport"] == name
        line = hub.daphne.wait_for(f"hub connected.*UserId={bob.id}")
        assert f"transport={transport}" in line
        assert ("protocol=messagepack" in line) is messagepack
        assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
        sent = [services.post_message(alice.id, chat.id, f"m{n}") for n in range(5)]
        assert [client.message()["messageId"] for _ in sent] == [str(m.id) for m in sent]
        hub.restart_daphne()
        client.next("state", "reconnecting", timeout=15)
        client.next("state", "reconnected", timeout=30)
        assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
        after = services.post_message(alice.id, chat.id, "after restart")
        assert client.message()["messageId"] == str(after.id)
    finally:
        client.kill()


@pytest.mark.parametrize(("transport", "messagepack", "name"), CASES[:2])
def test_at_token_expiry_the_client_reconnects_with_a_fresh_token(
    hub: Hub, transport: str, messagepack: bool, name: str
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    client = client_for(hub, bob, transport, messagepack, token=token_for(bob.id, lifetime=4))
    try:
        client.send_line(f"token {token_for(bob.id)}")  # what accessTokenFactory gives next
        client.next("token", "set")
        client.next("state", "reconnecting", timeout=15)  # closed with allowReconnect
        client.next("state", "reconnected", timeout=15)
        hub.daphne.wait_for(f"hub connection closed.*UserId={bob.id}.*reason=token expired")
        after = services.post_message(alice.id, chat.id, "after expiry")
        assert client.message()["messageId"] == str(after.id)
    finally:
        client.kill()


@pytest.mark.parametrize(("transport", "messagepack", "name"), CASES[:2])
def test_a_removed_participant_receives_nothing_more_of_the_chat(
    hub: Hub, transport: str, messagepack: bool, name: str
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id], title="team")  # a direct one keeps its two
    marker_chat = services.create_chat(alice.id, [bob.id], title="marker")
    client = client_for(hub, bob, transport, messagepack)
    try:
        services.remove_participant(alice.id, chat.id, bob.id)
        after_removal = services.post_message(alice.id, chat.id, "bob is gone")
        marker = services.post_message(alice.id, marker_chat.id, "marker")
        assert client.message()["messageId"] == str(marker.id)
        assert str(after_removal.id) not in "\n".join(client.lines)
        assert client.groups() == [f"user:{bob.id}", f"chat:{marker_chat.id}"]
    finally:
        client.kill()
