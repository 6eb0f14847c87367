"""Content a user writes cannot break anyone else's stream, end to end: the official
@microsoft/signalr client over JSON and over MessagePack in one chat, the real worker and
Daphne; hostile hub frames over both protocols end only their sender's connection."""

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from django.db import connection, transaction

from messenger_realtime.hub.protocols.messagepack import frame
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeOutboxStatus as Status
from project.messenger import services
from project.messenger.models import Message
from tests.support.api_client import Api, http_get, sample
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub
from tests.support.hub_helpers import token_for
from tests.support.runtime import wait_until
from tests.support.shared import env_key, shared
from tests.support.wire import RS, hub_socket, joined, push_to_user, records, until_closed

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
TOO_DEEP = "The maximum configured depth of 64 has been exceeded."


@pytest.fixture
def hub(request: pytest.FixtureRequest, hub_env: dict[str, str]) -> Iterator[Hub]:
    """As tests/e2e/conftest.py's, with no connection of the test before still open: these
    tests count the process's connections."""
    yield from shared(request, ("hub", env_key(hub_env)), lambda: Hub(hub_env), settle=True)


def received(client: Any, message_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The message_received payloads of these messages, in whatever order they came
    (fair claims interleave chats), once the client has them all."""

    def found() -> dict[str, dict[str, Any]] | None:
        seen = {
            o["payload"]["messageId"]: o["payload"]
            for o in client.outputs("event")
            if o["event"] == "message_received"
        }
        return seen if set(message_ids) <= set(seen) else None

    seen = wait_until(found, timeout=20, what=f"{len(message_ids)} messages")
    return {m: seen[m] for m in message_ids}


def both_receive(clients: list[Any], message_id: str) -> list[dict[str, Any]]:
    """The message_received payload for `message_id` from each client, in order."""
    return [received(client, [message_id])[message_id] for client in clients]


def test_json_and_messagepack_clients_of_a_chat_see_the_same_content(
    hub: Hub, clients: Any
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = str(services.create_chat(alice.id, [bob.id], title="files").id)
    readers = [clients(bob), clients(bob, options={"messagepack": True})]
    api = Api(hub.daphne.http, token_for(alice.id))
    path = f"/api/chats/{chat}/messages"

    # Keys that the contracts use for times, inside user content: carried as text on both
    # protocols (the MessagePack encoder used to turn them into timestamps by key name,
    # and a date without a zone closed every MessagePack connection of the chat).
    meta = {
        "name": "a",
        "createdAt": "2024-05-01",
        "sentAt": "not a date",
        "participant": {"joinedAt": "yesterday"},
        "size": 2**53 - 1,
    }
    sent = api.ok("POST", path, {"kind": "File", "fileMeta": meta})
    text, binary = both_receive(readers, sent["messageId"])
    assert text["fileMeta"] == binary["fileMeta"] == meta
    assert binary["sentAt"].keys() == {"$date"}  # the contract's own time: a timestamp

    # What no protocol carries exactly is refused at the door, naming the field.
    refused = [
        ({"kind": "File", "fileMeta": {"name": "a", "size": 2**96}}, "fileMeta.size is out of"),
        ({"kind": "File", "fileMeta": {"name": "a", "n": -(2**53)}}, "fileMeta.n is out of"),
    ]
    for body, error in refused:
        status, answer = api.call("POST", path, body)
        assert status == 400 and answer["error"].startswith(error)

    # Both connections are still open and get what follows.
    after = api.ok("POST", path, {"body": "after"})
    assert [p["body"] for p in both_receive(readers, after["messageId"])] == ["after", "after"]
    # Never closed or reconnecting: the content hurt no connection.
    assert [[s["state"] for s in r.outputs("state")] for r in readers] == [["connected"]] * 2


def test_a_legacy_row_no_protocol_carries_fails_alone_and_its_chat_goes_on(
    hub: Hub, clients: Any
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chats = [services.create_chat(alice.id, [bob.id], title=f"c{n}").id for n in range(4)]
    readers = [clients(bob), clients(bob, options={"messagepack": True})]
    # Committed together: a message whose metadata was written around the API (2^96, as
    # before the API checked), then messages in its chat and in three others.
    with transaction.atomic():
        poison = services.post_message(
            alice.id, chats[0], kind="File", file_meta={"name": "legacy"}
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Message._meta.db_table} SET file_meta = %s::jsonb WHERE id = %s",
                ['{"name": "legacy", "size": 79228162514264337593543950336}', poison.id],
            )
        innocent = [services.post_message(alice.id, chat, f"in {chat}") for chat in chats]
    ids = [str(m.id) for m in innocent]
    texts, binaries = (received(reader, ids) for reader in readers)
    for message in innocent:
        text, binary = texts[str(message.id)], binaries[str(message.id)]
        assert text.pop("sentAt") and binary.pop("sentAt").keys() == {"$date"}
        assert text == binary and text["body"] == message.body
    # The pass writes its outcomes after its push: the clients may have the messages
    # before the rows say so.
    rows = RealtimeOutboxEntry.objects.filter(message_id__in=[poison.id, *ids])
    wait_until(lambda: not rows.filter(status=Status.PENDING).exists(), what="the outcomes")
    row = RealtimeOutboxEntry.objects.get(message_id=poison.id)
    assert (row.status, row.attempts) == (Status.QUARANTINED, 1)
    assert row.last_error.startswith("UnencodablePayload: fileMeta.size is out of range")
    others = RealtimeOutboxEntry.objects.filter(message_id__in=[m.id for m in innocent])
    assert {(r.status, r.attempts, r.last_error) for r in others} == {(Status.DONE, 1, None)}
    assert not any(str(poison.id) in line for reader in readers for line in reader.lines)


def connections_gauge(hub: Hub) -> float:
    return sample(http_get(f"{hub.daphne.http}/metrics")[1], "messenger_realtime_hub_connections")


def deep_arguments(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return [value]


@pytest.mark.parametrize("levels", [100, 5000])
def test_a_json_frame_nested_too_deeply_closes_its_sender_alone_and_at_once(
    hub: Hub, levels: int
) -> None:
    user = UserFactory()
    with joined(hub.daphne, user) as bystander:
        with joined(hub.daphne, UserFactory()) as sender:
            assert connections_gauge(hub) == 2
            nesting = "[" * levels + "]" * levels
            sender.send(
                '{"type":1,"invocationId":"1","target":"GetGroups","arguments":['
                + nesting
                + "]}"
                + RS
            )
            (close,) = until_closed(sender)
        assert close == {
            "type": 7,
            "error": f"Connection closed with an error. InvalidDataException: {TOO_DEEP}",
        }
        # It left the registry (and its groups) now, not at the 30 s client timeout.
        wait_until(lambda: connections_gauge(hub) == 1, timeout=3, what="the sender released")
        push_to_user(user.id, 1)
        assert records(bystander)[0]["arguments"] == [{"seq": 1}]


def test_a_messagepack_frame_nested_too_deeply_closes_its_sender_alone(hub: Hub) -> None:
    user = UserFactory()
    with joined(hub.daphne, user) as bystander:
        with hub_socket(hub.daphne, token_for(UserFactory().id)) as sender:
            sender.send('{"protocol":"messagepack","version":1}' + RS)
            assert sender.recv(timeout=5) == b"{}" + RS.encode()
            hostile = msgpack.packb([1, {}, "1", "GetGroups", deep_arguments(100)])
            sender.send(frame(hostile))
            data = sender.recv(timeout=5)
            close = msgpack.unpackb(data[1:], raw=False)
            assert close[0] == 7 and TOO_DEEP in close[1]
        wait_until(lambda: connections_gauge(hub) == 1, timeout=3, what="the sender released")
        push_to_user(user.id, 2)
        assert records(bystander)[0]["arguments"] == [{"seq": 2}]
