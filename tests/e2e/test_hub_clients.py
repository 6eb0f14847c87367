"""Real SignalR clients (@microsoft/signalr, pysignalr, signalrcore) against Daphne.

Each client runs in a process of its own (tests/clients/), driven over stdin/stdout, with
the real dispatch worker delivering what owners commit.
"""

import signal
from typing import Any

import pytest
from django.core.management import call_command

from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub, HubClient
from tests.support.hub_helpers import token_for
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
LIBRARIES = ["@microsoft/signalr", "pysignalr", "signalrcore"]


def conversation() -> tuple[Any, Any, Any]:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    return alice, bob, services.create_chat(alice.id, [bob.id])


def assert_receives(client: HubClient, sender: Any, chat: Any, body: str) -> None:
    message = services.post_message(sender.id, chat.id, body)
    payload = client.message()
    assert (payload["chatId"], payload["messageId"], payload["seq"]) == (
        str(chat.id),
        str(message.id),
        message.seq,
    )


@pytest.mark.parametrize("library", LIBRARIES)
def test_client_receives_messages_and_reconnects_with_groups_rebuilt_when_dropped(
    hub: Hub, clients: Any, library: str
) -> None:
    alice, bob, chat = conversation()
    client = clients(bob, library)
    assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
    assert_receives(client, alice, chat, "hi bob")

    call_command("realtime_disconnect", str(bob.id))  # the server drops bob, stays up
    client.next("state", "reconnected", timeout=30)
    assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
    assert_receives(client, alice, chat, "again")


@pytest.mark.own_processes  # it restarts Daphne
def test_official_client_reconnects_across_a_server_restart(hub: Hub, clients: Any) -> None:
    # Only @microsoft/signalr retries through a window with no server at all: pysignalr
    # 1.3.3 and signalrcore 1.0.2 give up when a reconnect's negotiate is refused, so
    # they need another Daphne process behind the balancer (their drop-and-reconnect
    # is covered above, with the server up).
    alice, bob, chat = conversation()
    client = clients(bob)
    hub.restart_daphne()
    client.next("state", "reconnected", timeout=30)
    assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
    assert_receives(client, alice, chat, "after restart")


def test_official_client_closed_at_token_expiry_reconnects_with_a_fresh_token(
    hub: Hub,
) -> None:
    alice, bob, chat = conversation()
    client = HubClient("@microsoft/signalr", hub.url, token_for(bob.id, lifetime=4), hub.env)
    try:
        client.next("state", "connected")
        client.send_line(f"token {token_for(bob.id)}")  # what accessTokenFactory gives next
        client.next("token", "set")
        assert_receives(client, alice, chat, "before expiry")
        client.next("state", "reconnecting", timeout=15)  # closed with allowReconnect
        client.next("state", "reconnected", timeout=15)
        hub.daphne.wait_for(f"hub connection closed.*UserId={bob.id}.*reason=token expired")
        assert client.groups() == [f"user:{bob.id}", f"chat:{chat.id}"]
        assert_receives(client, alice, chat, "after expiry")
    finally:
        client.kill()


def test_a_non_participant_receives_nothing_of_the_chat(clients: Any) -> None:
    alice, bob, chat = conversation()
    mallory = UserFactory(name="mallory")
    mallorys_chat = services.create_chat(mallory.id, [alice.id])
    outsider, member = clients(mallory), clients(bob)
    private = services.post_message(alice.id, chat.id, "private to bob")
    assert member.message()["messageId"] == str(private.id)
    # Then something mallory may see: had the private message reached her, it would
    # have come first on her connection.
    services.post_message(alice.id, mallorys_chat.id, "for mallory")
    assert outsider.message()["chatId"] == str(mallorys_chat.id)
    assert str(chat.id) not in "\n".join(outsider.lines)


def test_a_removed_participant_receives_nothing_sent_after_the_removal(clients: Any) -> None:
    alice, bob, direct = conversation()
    chat = services.create_chat(alice.id, [bob.id], title="team")  # a direct one keeps its two
    marker_chat = services.create_chat(alice.id, [bob.id], title="marker")
    client = clients(bob)
    assert_receives(client, alice, chat, "before removal")
    services.remove_participant(alice.id, chat.id, bob.id)
    after_removal = services.post_message(alice.id, chat.id, "bob is gone")
    marker = services.post_message(alice.id, marker_chat.id, "marker")
    assert client.message()["messageId"] == str(marker.id)
    assert str(after_removal.id) not in "\n".join(client.lines)
    kept = sorted(f"chat:{c.id}" for c in (direct, marker_chat))
    assert client.groups() == [f"user:{bob.id}", *kept]


def test_an_added_participant_starts_receiving_without_reconnecting(clients: Any) -> None:
    alice, bob, _chat = conversation()
    carol = UserFactory(name="carol")
    group = services.create_chat(alice.id, [bob.id], title="team")
    client = clients(carol)
    assert client.groups() == [f"user:{carol.id}"]
    services.add_participant(alice.id, group.id, carol.id)
    client.next("event", "chat_updated")
    assert_receives(client, alice, group, "welcome carol")


def test_single_process_mode_runs_the_dispatcher_inside_daphne(worker_env: dict[str, str]) -> None:
    env = dict(worker_env, REALTIME_BACKPLANE_ENABLED="false", PYTHONFAULTHANDLER="1")
    refused = WorkerProcess(env, "--once")
    assert refused.wait() != 0
    assert "the dispatcher runs inside Daphne" in refused.log()
    refused.kill()

    daphne = DaphneProcess(env)  # in-memory channel layer, no worker process
    alice, bob, chat = conversation()
    client = HubClient(
        "@microsoft/signalr", f"{daphne.http}/hubs/messenger", token_for(bob.id), env
    )
    try:
        daphne.wait_for("dispatcher running inside Daphne")
        client.next("state", "connected")
        assert_receives(client, alice, chat, "one process")
        daphne.signal(signal.SIGTERM)
        code = daphne.wait()
        assert code == 0, daphne.log()
    finally:
        client.kill()
        daphne.kill()
