"""Input the database cannot store, malformed path ids and failures: always a JSON answer
under /api/ (never Django's HTML page), naming the field, with nothing written."""

import json
from typing import Any

import pytest
from django.test import Client

from messenger_realtime.models import RealtimeOutboxEntry
from project.messenger import services
from project.messenger.models import Chat, Message
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for

pytestmark = pytest.mark.django_db
NUL = "\\u0000"  # as JSON text: json.dumps() would escape the backslash
SURROGATE = "\\ud800"


@pytest.fixture
def alice_and_chat() -> tuple[Client, Any, Any]:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id], title="t")
    client = Client(
        headers={"Authorization": f"Bearer {token_for(alice.id)}"}, raise_request_exception=False
    )
    return client, chat, services.post_message(alice.id, chat.id, "first")


def counts() -> tuple[int, int, int]:
    return RealtimeOutboxEntry.objects.count(), Message.objects.count(), Chat.objects.count()


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "lone-surrogate"])
@pytest.mark.parametrize(
    ("method", "path", "raw", "field"),
    [
        ("POST", "/api/chats/{chat}/messages", '{"body": "a%sb"}', "body"),
        ("POST", "/api/chats/{chat}/messages", '{"body": "x", "cardText": "%s"}', "cardText"),
        (
            "POST",
            "/api/chats/{chat}/messages",
            '{"kind": "File", "fileMeta": {"name": "f%s.png"}}',
            "fileMeta.name",
        ),
        (
            "POST",
            "/api/chats/{chat}/messages",
            '{"kind": "File", "fileMeta": {"name": "f", "tags": ["ok", "%s"]}}',
            "fileMeta.tags[1]",
        ),
        (
            "POST",
            "/api/chats/{chat}/messages",
            '{"kind": "File", "fileMeta": {"%s": 1}}',
            "fileMeta",
        ),
        ("POST", "/api/chats", '{"memberIds": ["{bob}"], "title": "%s"}', "title"),
        ("PATCH", "/api/chats/{chat}", '{"title": "%s"}', "title"),
        ("PATCH", "/api/chats/{chat}/messages/{message}", '{"body": "%s"}', "body"),
        ("POST", "/api/contacts", '{"userId": "%s"}', "userId"),
    ],
)
def test_a_string_the_database_cannot_store_is_a_400_naming_its_field_and_writes_nothing(
    alice_and_chat: Any, bad: str, method: str, path: str, raw: str, field: str
) -> None:
    client, chat, message = alice_and_chat
    bob = chat.participants.exclude(user__username__startswith="alice").get().user_id
    url = path.format(chat=chat.id, message=message.id)
    content = raw.replace("{bob}", str(bob)) % bad
    before = counts()
    response = client.generic(method, url, content, content_type="application/json")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error.startswith(field) and "NUL or unpaired surrogate" in error
    assert counts() == before
    assert Message.objects.get(id=message.id).body == "first"
    assert Chat.objects.get(id=chat.id).title == "t"


@pytest.mark.parametrize(
    ("method", "path", "name"),
    [
        ("GET", "/api/chats/not-a-uuid", "chatId"),
        ("GET", "/api/chats/123/messages", "chatId"),
        ("PATCH", "/api/chats/{chat}/messages/nope", "messageId"),
        ("DELETE", "/api/chats/{chat}/participants/%00", "userId"),
        ("POST", "/api/calls/x/answer", "callId"),
        ("POST", "/api/recordings/zz/stop", "recordingId"),
        ("POST", "/api/contacts/zz/accept", "contactId"),
        ("DELETE", "/api/blacklist/%ED%A0%80", "userId"),
    ],
)
def test_a_malformed_id_in_an_api_path_is_a_json_400_naming_it(
    alice_and_chat: Any, method: str, path: str, name: str
) -> None:
    client, chat, _message = alice_and_chat
    before = counts()
    response = client.generic(method, path.format(chat=chat.id), "{}", "application/json")
    assert (response.status_code, response.json()) == (400, {"error": f"{name} must be a UUID"})
    assert counts() == before


def test_an_unknown_api_path_is_a_json_404_not_an_html_page(alice_and_chat: Any) -> None:
    client, _chat, _message = alice_and_chat
    for path in ("/api/nothing-here", "/api/chats/a/b/c/d", "/api/"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json() == {"error": "not found: no such endpoint"}
    assert b"<html" in Client().get("/not-the-api").content.lower()  # elsewhere: Django's page


def test_an_unexpected_failure_under_the_api_is_a_json_500_without_details(
    alice_and_chat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, chat, _message = alice_and_chat

    def explode(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("secret detail")

    monkeypatch.setattr("project.messenger.services.messages.post_once", explode)
    response = client.post(
        f"/api/chats/{chat.id}/messages", json.dumps({"body": "x"}), "application/json"
    )
    assert response.status_code == 500
    assert response.json() == {"error": "internal server error"}
    assert b"secret" not in response.content


def nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


FILE = '{"kind": "File", "fileMeta": %s}'


@pytest.mark.parametrize(
    ("path", "raw", "error"),
    [
        (
            "/api/chats/{chat}/messages",
            FILE % '{"name": "a", "size": 79228162514264337593543950336}',
            "fileMeta.size is out of range (integers within ±9007199254740991)",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % '{"name": "a", "size": 9007199254740992}',
            "fileMeta.size is out of range (integers within ±9007199254740991)",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % f'{{"name": "a", "x": {nested(8)}}}',
            "fileMeta is nested deeper than 8 levels",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % f'{{"name": "a", "x": {nested(600)}}}',
            "fileMeta is nested deeper than 8 levels",
        ),
        ("/api/chats/{chat}/messages", FILE % nested(2000), "the body is nested too deeply"),
        (
            "/api/chats/{chat}/messages",
            FILE % '{"name": "a", "ratio": NaN}',
            "the body must not contain NaN (JSON has no such number)",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % '{"name": "a", "ratio": -Infinity}',
            "the body must not contain -Infinity (JSON has no such number)",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % '{"name": "a", "ratio": 1e400}',  # json.loads reads it as inf
            "fileMeta.ratio is not a finite number (no NaN or Infinity)",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % f'{{"name": "a", "tags": [{",".join(["1"] * 101)}]}}',
            "fileMeta.tags has more than 100 items",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % f'{{"name": "a", "{"k" * 129}": 1}}',
            "fileMeta has a key longer than 128 characters",
        ),
        (
            "/api/chats/{chat}/messages",
            FILE % f'{{"name": "{"n" * 10_001}"}}',
            "fileMeta.name is longer than 10000 characters",
        ),
        ("/api/chats/{chat}/read", '{"seq": 79228162514264337593543950336}', "seq is out of"),
        ("/api/chats/{chat}/read", '{"seq": NaN}', "the body must not contain NaN"),
    ],
    ids=[
        "2^96",
        "2^53",
        "depth-9",
        "depth-600",
        "depth-2000",
        "nan",
        "-infinity",
        "1e400",
        "101-items",
        "long-key",
        "long-string",
        "seq-2^96",
        "seq-nan",
    ],
)
def test_content_no_hub_protocol_carries_exactly_is_a_400_naming_its_field(
    alice_and_chat: Any, path: str, raw: str, error: str
) -> None:
    client, chat, _message = alice_and_chat
    before = counts()
    response = client.post(path.format(chat=chat.id), raw, "application/json")
    assert response.status_code == 400, response.content[:200]
    assert response.json()["error"].startswith(error)
    assert counts() == before


def test_content_within_the_limits_is_stored_exactly_as_sent(alice_and_chat: Any) -> None:
    client, chat, _message = alice_and_chat
    meta = {
        "name": "a",
        "createdAt": "2024-05-01",
        "size": 2**53 - 1,
        "x": json.loads(nested(7)),
        "tags": list(range(100)),
    }
    response = client.post(
        f"/api/chats/{chat.id}/messages",
        json.dumps({"kind": "File", "fileMeta": meta}),
        "application/json",
    )
    assert response.status_code == 201
    assert Message.objects.get(id=response.json()["messageId"]).file_meta == meta


def test_the_content_limits_are_settings(alice_and_chat: Any, settings: Any) -> None:
    client, chat, _message = alice_and_chat
    settings.MESSENGER_REALTIME = {**settings.MESSENGER_REALTIME, "CONTENT_MAX_DEPTH": 2}
    raw = FILE % '{"name": "a", "x": {"y": {"z": 1}}}'
    response = client.post(f"/api/chats/{chat.id}/messages", raw, "application/json")
    assert response.json() == {"error": "fileMeta is nested deeper than 2 levels"}
    settings.MESSENGER_REALTIME = {**settings.MESSENGER_REALTIME, "CONTENT_MAX_STRING": 5}
    response = client.post(
        f"/api/chats/{chat.id}/messages", '{"body": "123456"}', "application/json"
    )
    assert response.json() == {"error": "body must be 1-5 characters"}
