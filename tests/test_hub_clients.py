"""Real SignalR clients (@microsoft/signalr, pysignalr, signalrcore) against Daphne.

Each client runs in a process of its own (tests/clients/), driven over stdin/stdout, with
the real dispatch worker delivering what owners commit.
"""

import json
import shutil
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from project.messenger import services

from .conftest import ROOT
from .hub_helpers import make_user, token_for
from .workers import DaphneProcess, LoggedProcess, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
CLIENTS = ROOT / "tests" / "clients"
LIBRARIES = ["@microsoft/signalr", "pysignalr", "signalrcore"]


class Hub:
    """Daphne plus the dispatch worker, on the test database; Daphne can be restarted."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.worker = WorkerProcess(env, polling_interval=0.5)
        self.daphne = DaphneProcess(env)
        self.url = f"{self.daphne.http}/hubs/messenger"

    def restart_daphne(self) -> None:
        """SIGTERM (clients get Close with allowReconnect), then a new Daphne, same port."""
        self.daphne.signal(signal.SIGTERM)
        assert self.daphne.wait() == 0
        port = self.daphne.port
        self.daphne.kill()
        self.daphne = DaphneProcess(self.env, port=port)

    def close(self) -> None:
        self.daphne.kill()
        self.worker.kill()


class HubClient(LoggedProcess):
    """One of the real clients in a process of its own; its output is JSON lines."""

    def __init__(self, library: str, url: str, token: str, env: dict[str, str]) -> None:
        if library == "@microsoft/signalr":
            node = shutil.which("node")
            assert node, "node is required (scripts/test installs it on a fresh machine)"
            argv = [node, str(CLIENTS / "node_client.mjs"), url, token]
        else:
            argv = [sys.executable, str(CLIENTS / "py_client.py"), library, url, token]
        super().__init__(argv, env, cwd=str(ROOT))

    def next(self, key: str, value: Any = None, timeout: float = 15) -> dict[str, Any]:
        """The next output object that has `key` (equal to `value` when given)."""

        def accept(line: str) -> bool:
            try:
                obj = json.loads(line)
            except ValueError:
                return False  # a library's own log line
            return isinstance(obj, dict) and key in obj and value in (None, obj[key])

        return dict(json.loads(self.wait_line(accept, f"{key}={value}", timeout)))

    def groups(self) -> list[str]:
        self.send_line("groups")
        return list(self.next("groups")["groups"])

    def message(self) -> dict[str, Any]:
        return dict(self.next("event", "message_received")["payload"])


@pytest.fixture
def hub(worker_env: dict[str, str]) -> Iterator[Hub]:
    server = Hub(worker_env)
    yield server
    server.close()


@pytest.fixture
def clients(hub: Hub) -> Iterator[Any]:
    started: list[HubClient] = []

    def connect(user: Any, library: str = "@microsoft/signalr") -> HubClient:
        client = HubClient(library, hub.url, token_for(user.id), hub.env)
        started.append(client)
        client.next("state", "connected")
        return client

    yield connect
    for client in started:
        client.kill()


def conversation() -> tuple[Any, Any, Any]:
    alice, bob = make_user("alice"), make_user("bob")
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


def test_a_non_participant_receives_nothing_of_the_chat(clients: Any) -> None:
    alice, bob, chat = conversation()
    mallory = make_user("mallory")
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
    alice, bob, chat = conversation()
    marker_chat = services.create_chat(alice.id, [bob.id], title="marker")
    client = clients(bob)
    assert_receives(client, alice, chat, "before removal")
    services.remove_participant(alice.id, chat.id, bob.id)
    after_removal = services.post_message(alice.id, chat.id, "bob is gone")
    marker = services.post_message(alice.id, marker_chat.id, "marker")
    assert client.message()["messageId"] == str(marker.id)
    assert str(after_removal.id) not in "\n".join(client.lines)
    assert client.groups() == [f"user:{bob.id}", f"chat:{marker_chat.id}"]


def test_an_added_participant_starts_receiving_without_reconnecting(clients: Any) -> None:
    alice, bob, _chat = conversation()
    carol = make_user("carol")
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
