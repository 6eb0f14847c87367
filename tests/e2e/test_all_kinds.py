"""Every RealtimeDispatchKind from its owner use case (REST over HTTP, or the reaper and
recording commands) through the real worker and Daphne to connected official clients,
with the contracts' shapes pinned and the media secrets checked; every event reaches the
official MessagePack client too, with the same content (its times as timestamps)."""

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import jwt
import pytest
from django.core.management import call_command
from django.db import connection

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.contracts.base import TIME_FIELDS
from messenger_realtime.outbox.enums import RealtimeDispatchKind, event_name
from tests.support.api_client import Api
from tests.support.factories import UserFactory
from tests.support.hub_clients import Hub, HubClient
from tests.support.hub_helpers import token_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


class Person:
    """A user with a REST client and two connected @microsoft/signalr clients: JSON and
    MessagePack (the official protocol package)."""

    def __init__(self, hub: Hub, clients: Callable[..., HubClient], name: str) -> None:
        self.user = UserFactory(name=name)
        self.id = str(self.user.id)
        self.api = Api(hub.daphne.http, token_for(self.user.id))
        self.client = clients(self.user)
        self.binary = clients(self.user, options={"messagepack": True})
        # (event, JSON payload, MessagePack payload) of every event read
        self.pairs: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def event(self, name: str, **match: Any) -> dict[str, Any]:
        """The next `name` event whose payload has the `match` items (and the same event
        from the MessagePack client, kept in `pairs`)."""

        def accept(line: str) -> bool:
            return f'"event":"{name}"' in line and all(
                f'"{k}":"{v}"' in line for k, v in match.items()
            )

        payload = dict(json.loads(self.client.wait_line(accept, name, timeout=20))["payload"])
        binary = json.loads(self.binary.wait_line(accept, name, timeout=20))["payload"]
        self.pairs.append((name, payload, binary))
        return payload


def as_dates(payload: Any, *, binary: bool, key: str = "") -> Any:
    """The payload with each time as UTC to the millisecond (what a JavaScript Date holds):
    JSON's ISO text, or the MessagePack client's Date ({"$date": ISO}); only time fields
    may hold one."""
    if isinstance(payload, dict) and set(payload) == {"$date"}:
        assert binary and key in TIME_FIELDS, key
        return datetime.fromisoformat(payload["$date"]).astimezone(UTC).isoformat()
    if isinstance(payload, dict):
        return {k: as_dates(v, binary=binary, key=k) for k, v in payload.items()}
    if isinstance(payload, str) and key in TIME_FIELDS:
        assert not binary, f"{key} arrived as text over MessagePack"
        moment = datetime.fromisoformat(payload).astimezone(UTC)
        return moment.replace(microsecond=moment.microsecond // 1000 * 1000).isoformat()
    return payload


def without_media_secrets(payload: dict[str, Any]) -> dict[str, Any]:
    """Media credentials are minted per delivery: only the room must be the same."""
    media = payload.get("media")
    return {**payload, "media": media["roomName"]} if media else payload


def keys(payload: dict[str, Any]) -> set[str]:
    return set(payload)


def test_every_kind_reaches_its_recipients_with_its_contract(hub: Hub, clients: Any) -> None:
    alice, bob, carol = (Person(hub, clients, n) for n in ("alice", "bob", "carol"))
    seen: dict[str, dict[str, Any]] = {}

    # Chats and messages -------------------------------------------------------------
    direct = alice.api.ok("POST", "/api/chats", {"memberIds": [bob.id]})["chatId"]
    # A new chat's ChatUpdated comes to each member's own stream, and to the chat's, which
    # a connection hears only once the membership fast path has joined it to the chat's
    # group (each connection on its own time): the member's own is the one both hear.
    seen["chat_updated"] = bob.event("chat_updated", chatId=direct, stream=f"user:{bob.id}")
    team = alice.api.ok("POST", "/api/chats", {"memberIds": [bob.id, carol.id], "title": "t"})
    team_id = team["chatId"]
    carol.event("chat_updated", chatId=team_id, stream=f"user:{carol.id}")
    sent = alice.api.ok("POST", f"/api/chats/{direct}/messages", {"body": "hi bob"})
    seen["message_received"] = bob.event("message_received", messageId=sent["messageId"])
    alice.api.ok("PATCH", f"/api/chats/{direct}/messages/{sent['messageId']}", {"body": "hi!"})
    seen["message_edited"] = bob.event("message_edited")
    alice.api.ok("DELETE", f"/api/chats/{direct}/messages/{sent['messageId']}")
    seen["message_deleted"] = bob.event("message_deleted")
    bob.api.ok("POST", f"/api/chats/{direct}/read", {"seq": 1})
    seen["read_receipt_updated"] = alice.event("read_receipt_updated")
    alice.api.ok("PATCH", f"/api/chats/{team_id}", {"title": "team two"})
    renamed = carol.event("chat_updated", change="TitleChanged")

    # Contacts and the blacklist -----------------------------------------------------
    contact = alice.api.ok("POST", "/api/contacts", {"userId": carol.id})["contactId"]
    seen["contact_request_received"] = carol.event("contact_request_received")
    carol.api.ok("POST", f"/api/contacts/{contact}/accept")
    seen["contact_request_accepted"] = alice.event("contact_request_accepted")
    alice.api.ok("DELETE", f"/api/contacts/{contact}")
    seen["contact_removed"] = carol.event("contact_removed")
    alice.api.ok("POST", "/api/blacklist", {"userId": carol.id})
    seen["blacklist_changed"] = alice.event("blacklist_changed")

    # A 1:1 call (SessionKind Direct -> the parties' user groups) ----------------------
    call = alice.api.ok("POST", f"/api/chats/{direct}/calls")
    seen["call_invited"] = bob.event("call_invited", callId=call["callId"])
    bob.api.ok("POST", f"/api/calls/{call['callId']}/answer")
    seen["call_answered"] = alice.event("call_answered")
    alice.api.ok("POST", f"/api/calls/{call['callId']}/screen-share", {"active": True})
    seen["screen_share_started"] = bob.event("screen_share_started")
    alice.api.ok("POST", f"/api/calls/{call['callId']}/screen-share", {"active": False})
    seen["screen_share_stopped"] = bob.event("screen_share_stopped")
    recording = alice.api.ok("POST", f"/api/calls/{call['callId']}/recordings")["recordingId"]
    seen["recording_started"] = bob.event("recording_started")
    alice.api.ok("POST", f"/api/recordings/{recording}/stop")
    seen["recording_stopped"] = bob.event("recording_stopped")
    call_command("finalize_recording", recording, "--url", "https://media.example/r.mp4")
    seen["recording_available"] = bob.event("recording_available")
    failing = alice.api.ok("POST", f"/api/calls/{call['callId']}/recordings")["recordingId"]
    call_command("finalize_recording", failing, "--failed", "DiskFull")
    seen["recording_failed"] = bob.event("recording_failed")
    alice.api.ok("POST", f"/api/calls/{call['callId']}/end")
    seen["call_ended"] = bob.event("call_ended")
    for action, name in (("decline", "call_declined"), ("cancel", "call_cancelled")):
        again = alice.api.ok("POST", f"/api/chats/{direct}/calls")["callId"]
        (bob if action == "decline" else alice).api.ok("POST", f"/api/calls/{again}/{action}")
        seen[name] = (alice if action == "decline" else bob).event(name, callId=again)
    ringing = alice.api.ok("POST", f"/api/chats/{direct}/calls")["callId"]
    call_command("reap_calls", "--timeout", "0")  # the call-timeout reaper
    seen["call_missed"] = bob.event("call_missed", callId=ringing)

    # A conference (SessionKind Conference -> the chat group) --------------------------
    conference = alice.api.ok("POST", f"/api/chats/{team_id}/conferences")["callId"]
    seen["conference_started"] = carol.event("conference_started", conferenceId=conference)
    alice.api.ok("POST", f"/api/calls/{conference}/invite", {"userId": carol.id})
    seen["conference_invited"] = carol.event("conference_invited")
    bob.api.ok("POST", f"/api/calls/{conference}/join")
    seen["conference_participant_joined"] = carol.event("conference_participant_joined")
    bob.api.ok("POST", f"/api/calls/{conference}/leave")
    seen["conference_participant_left"] = carol.event("conference_participant_left")
    alice.api.ok("POST", f"/api/calls/{conference}/end")
    seen["conference_ended"] = carol.event("conference_ended")

    assert set(seen) == {event_name(k) for k in RealtimeDispatchKind.values}

    # The same 26 kinds over MessagePack, with the same content ------------------------
    pairs = [pair for person in (alice, bob, carol) for pair in person.pairs]
    assert {name for name, _, _ in pairs} == set(seen)
    for _, text, binary in pairs:
        assert without_media_secrets(as_dates(binary, binary=True)) == without_media_secrets(
            as_dates(text, binary=False)
        )
    assert all(
        "$date" in json.dumps(binary) for name, _, binary in pairs if name != "read_receipt_updated"
    )
    assert "protocol=messagepack" in "\n".join(hub.daphne.lines)

    # Pinned shapes --------------------------------------------------------------------
    # Every event names its group's stream and its offset there (docs/hub.md, "Recovery").
    for name, payload in seen.items():
        stream, offset = payload.pop("stream"), payload.pop("offset")
        assert stream.startswith(("chat:", "user:")) and offset >= 1, name
        if stream.startswith("chat:") and "chatId" in payload:
            assert stream == f"chat:{payload['chatId']}", name
    base_message = {"chatId", "messageId", "seq", "senderUserId", "kind", "sentAt"}
    assert keys(seen["message_received"]) == base_message | {"body"}
    assert seen["message_received"]["body"] == "hi bob"
    # (received before the delete was sent, so built from the edited message)
    assert seen["message_edited"]["body"] == "hi!"
    assert keys(seen["message_edited"]) == {"chatId", "messageId", "seq", "body", "editedAt"}
    assert keys(seen["message_deleted"]) == {"chatId", "messageId", "seq", "deletedAt"}
    assert seen["read_receipt_updated"] == {"chatId": direct, "userId": bob.id, "lastReadSeq": 1}
    assert renamed["title"] == "team two"
    assert keys(seen["chat_updated"]) == {"chatId", "chatEventId", "actorUserId", "change", "at"}
    for name in ("contact_request_received", "contact_request_accepted", "contact_removed"):
        assert keys(seen[name]) == {"contactId", "userId", "status", "at"}
    assert seen["contact_request_received"]["userId"] == alice.id
    assert seen["blacklist_changed"]["blockedUserId"] == carol.id
    assert seen["blacklist_changed"]["blocked"] is True
    direct_call = seen["call_invited"]
    assert direct_call["sessionKind"] == "Direct"
    assert {"callId", "callerUserId", "calleeUserId", "status", "media"} <= keys(direct_call)
    assert seen["conference_started"]["sessionKind"] == "Conference"
    assert {"conferenceId", "startedByUserId", "media"} <= keys(seen["conference_started"])
    assert seen["conference_participant_joined"]["participant"]["userId"] == bob.id
    assert seen["recording_available"]["recording"]["fileUrl"] == "https://media.example/r.mp4"
    assert seen["recording_failed"]["recording"]["failureCode"] == "DiskFull"
    assert seen["screen_share_started"]["participant"]["screenSharing"] is True

    # Media credentials: minted per recipient at delivery, valid, and stored nowhere ----
    media = seen["conference_invited"]["media"]
    options = load_hub_options()
    claims = jwt.decode(
        media["accessToken"],
        options.media_jwt_signing_key,
        algorithms=["HS256"],
        audience=options.media_jwt_audience,
    )
    assert (claims["sub"], claims["room"]) == (carol.id, media["roomName"])
    assert claims["exp"] - claims["iat"] == int(options.media_token_ttl)
    turn = next(s for s in media["iceServers"] if "username" in s)
    expiry, user = turn["username"].split(":")
    assert user == carol.id and int(expiry) > claims["iat"]
    expected = hmac.new(
        options.turn_shared_secret.encode(), turn["username"].encode(), hashlib.sha1
    ).digest()
    assert turn["credential"] == base64.b64encode(expected).decode()
    assert bob.event("conference_invited")["media"]["accessToken"] != media["accessToken"]

    secrets = [media["accessToken"], turn["credential"], direct_call["media"]["accessToken"]]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema IN ('public', 'messenger') AND table_type = 'BASE TABLE'"
        )
        tables = cur.fetchall()
        dump = []
        for schema, table in tables:
            cur.execute(f'SELECT t::text FROM "{schema}"."{table}" t')
            dump += [row[0] for row in cur.fetchall()]
    text = "\n".join(dump)
    assert "conf-" in text  # the scan reads the tables that hold room names
    logs = "\n".join(hub.worker.lines + hub.daphne.lines)
    for secret in secrets:
        assert secret not in text and secret not in logs
    assert "hi bob" not in logs  # no message body in any log
