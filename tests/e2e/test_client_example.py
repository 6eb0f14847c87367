"""The README's client, `docs/examples/client.mjs`, run as a newcomer runs it: the official
@microsoft/signalr client under Node against a served hub (Daphne + worker). It prints
what a member gets over the hub and, after a reconnect, recovers with `Recover` what it
missed from the offsets it holds."""

import json
import shutil
import signal
from typing import Any

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus
from project.messenger import services
from tests.support.api_client import Api
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub
from tests.support.hub_helpers import token_for
from tests.support.runtime import ROOT, wait_until
from tests.support.workers import DaphneProcess, LoggedProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
EXAMPLE = ROOT / "docs" / "examples" / "client.mjs"


def node() -> str:
    found = shutil.which("node")
    assert found, "node is required (scripts/test installs it on a fresh machine)"
    return found


class Example(LoggedProcess):
    """`node docs/examples/client.mjs HUB_URL TOKEN CHAT_ID` from the repository's root."""

    def __init__(self, hub: Hub, user: Any, chat: Any) -> None:
        argv = [node(), str(EXAMPLE.relative_to(ROOT)), hub.url, token_for(user.id), str(chat.id)]
        super().__init__(argv, hub.env, cwd=str(ROOT))

    def event(self, name: str, stream: str) -> tuple[int, dict[str, Any]]:
        """The next `<name> <stream>@<offset> <payload>` line: (offset, payload)."""
        line = self.wait_for(rf"^{name} {stream}@\d+ \{{", timeout=30)
        where, payload = line.split(" ", 2)[1:]
        return int(where.rsplit("@", 1)[1]), json.loads(payload)

    def printed(self, name: str) -> list[str]:
        return [line for line in self.lines if line.startswith(name + " ")]


@pytest.fixture
def example(hub: Hub) -> Any:
    started: list[Example] = []

    def start(user: Any, chat: Any) -> Example:
        client = Example(hub, user, chat)
        started.append(client)
        return client

    yield start
    for client in started:
        client.kill()


@pytest.mark.own_processes  # it stops Daphne and starts another
def test_the_example_prints_a_message_sent_over_rest_and_recovers_one_sent_while_away(
    hub: Hub, example: Any
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id], title="team")
    stream = f"chat:{chat.id}"
    client = example(bob, chat)
    client.wait_for(rf"^loaded {stream}@\d+ \(team, lastSeq 0\)$")
    client.wait_for(rf"^connected to {hub.url}$")
    client.wait_for(rf"^recover {stream}: recovered$")

    sent = Api(hub.daphne.http, token_for(alice.id)).ok(
        "POST", f"/api/chats/{chat.id}/messages", {"body": "hello from REST"}
    )
    offset, payload = client.event("message_received", stream)
    assert (payload["messageId"], payload["body"], payload["stream"]) == (
        sent["messageId"],
        "hello from REST",
        stream,
    )

    # Away: Daphne stops (Close with allowReconnect); a message is committed and pushed
    # to nobody; only then does a Daphne answer again, so only Recover can bring it.
    hub.daphne.signal(signal.SIGTERM)
    assert hub.daphne.wait() == 0
    client.wait_for("^reconnecting: ")
    port = hub.daphne.port
    hub.daphne.kill()
    missed = services.post_message(alice.id, chat.id, "sent while away")
    rows = RealtimeOutboxEntry.objects.filter(message_id=missed.id)
    wait_until(
        lambda: rows.exists() and not rows.exclude(status=RealtimeOutboxStatus.DONE).exists(),
        timeout=30,
        what="the worker pushing the missed message to no one",
    )
    hub.daphne = DaphneProcess(hub.env, port=port)
    client.wait_for("^reconnected$", timeout=60)
    later, payload = client.event("message_received", stream)
    assert (later, payload["messageId"], payload["body"]) == (
        offset + 1,
        str(missed.id),
        "sent while away",
    )
    client.wait_for(rf"^recover {stream}: recovered$")
    # Each message printed once: the live one is not repeated by the recovery.
    bodies = [
        json.loads(line.split(" ", 2)[2])["body"] for line in client.printed("message_received")
    ]
    assert bodies == ["hello from REST", "sent while away"]


def test_the_example_without_its_arguments_says_what_it_needs() -> None:
    proc = LoggedProcess([node(), str(EXAMPLE)], {"PATH": "/usr/bin:/bin"}, cwd=str(ROOT))
    assert proc.wait() == 2
    proc.kill()
    assert proc.lines == [
        "usage: node docs/examples/client.mjs HUB_URL TOKEN CHAT_ID (or those env variables)"
    ]
