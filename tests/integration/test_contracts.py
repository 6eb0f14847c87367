"""Contracts: one per kind, and rows that can never be built are quarantined at once."""

import uuid
from typing import Any

import pytest
from django.db import transaction

from messenger_realtime import outbox
from messenger_realtime.contracts.build import CONTRACTS
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox import OutboxIntent
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind, SessionKind
from project.messenger import services
from tests.support.dispatch import one_pass
from tests.support.factories import UserFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")


def test_every_kind_has_a_contract() -> None:
    assert set(CONTRACTS) == set(RealtimeDispatchKind.values)


def dispatch(*intents: OutboxIntent) -> tuple[RecordingPublisher, list[RealtimeOutboxEntry]]:
    with transaction.atomic():
        entries = outbox.enqueue_many(intents)
    publisher = RecordingPublisher()
    run(one_pass(options(), publisher))
    return publisher, [RealtimeOutboxEntry.objects.get(id=e.id) for e in entries]


def chat_with_call() -> tuple[Any, Any, Any, Any]:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id])
    call = services.start_call(alice.id, chat.id)
    RealtimeOutboxEntry.objects.all().delete()  # only the rows under test from here
    return alice, bob, chat, call


def test_session_kind_routes_direct_to_the_callee_and_conference_to_the_chat() -> None:
    alice, bob, chat, call = chat_with_call()
    team = services.create_chat(alice.id, [bob.id], title="team")
    services.cancel_call(alice.id, call.id)
    conference = services.start_conference(alice.id, team.id)
    RealtimeOutboxEntry.objects.all().delete()
    direct = OutboxIntent(
        "CallInvited",
        RealtimeTargetKind.USER,
        chat_id=chat.id,
        target_user_id=bob.id,
        ref_id=call.id,
        session_kind=SessionKind.DIRECT,
    )
    group = OutboxIntent(
        "CallInvited",
        RealtimeTargetKind.CHAT_GROUP,
        chat_id=team.id,
        ref_id=conference.id,
        session_kind=SessionKind.CONFERENCE,
    )
    publisher, entries = dispatch(direct, group)
    assert [e.status for e in entries] == ["Done", "Done"]
    to_bob, to_team = publisher.events
    assert (str(to_bob.target), to_bob.payload["sessionKind"]) == (f"user:{bob.id}", "Direct")
    assert to_bob.payload["callId"] == str(call.id)
    # The direct call was cancelled (to start the conference): no media for a session that
    # cannot be joined any more; the active conference's invitation carries its room.
    assert to_bob.payload["status"] == "Cancelled" and "media" not in to_bob.payload
    assert (str(to_team.target), to_team.payload["sessionKind"]) == (
        f"chat:{team.id}",
        "Conference",
    )
    assert to_team.payload["conferenceId"] == str(conference.id)
    assert to_team.payload["media"] == {"roomName": conference.room_name}  # secrets come later


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("missing entity", "EntityNotFound"),
        ("no session kind", "MissingSessionKind"),
        ("wrong session kind", "SessionKindMismatch"),
        ("direct call to a chat group", "InvalidTarget"),
        ("direct call to an outsider", "InvalidTarget"),
        ("body to a user group", "InvalidTarget"),
        ("message of another chat", "ReferenceMismatch"),
        ("contact event to a stranger", "InvalidTarget"),
        ("non-media row with a session kind", "InvalidSessionKind"),
    ],
)
def test_a_row_that_can_never_be_built_is_quarantined_at_once(case: str, error: str) -> None:
    alice, bob, chat, call = chat_with_call()
    message = services.post_message(alice.id, chat.id, "secret body")
    contact = services.request_contact(alice.id, bob.id)
    stranger = UserFactory(name="stranger")
    RealtimeOutboxEntry.objects.all().delete()
    user, group = RealtimeTargetKind.USER, RealtimeTargetKind.CHAT_GROUP
    intent = {
        "missing entity": OutboxIntent(
            "ContactRemoved", user, target_user_id=bob.id, ref_id=uuid.uuid4()
        ),
        "no session kind": OutboxIntent(
            "CallAnswered", user, target_user_id=bob.id, ref_id=call.id
        ),
        "wrong session kind": OutboxIntent(
            "CallAnswered", group, chat_id=chat.id, ref_id=call.id, session_kind="Conference"
        ),
        "direct call to a chat group": OutboxIntent(
            "CallAnswered", group, chat_id=chat.id, ref_id=call.id, session_kind="Direct"
        ),
        "direct call to an outsider": OutboxIntent(
            "CallAnswered", user, target_user_id=stranger.id, ref_id=call.id, session_kind="Direct"
        ),
        "body to a user group": OutboxIntent(
            "MessageReceived", user, chat_id=chat.id, target_user_id=bob.id, message_id=message.id
        ),
        "message of another chat": OutboxIntent(
            "MessageReceived", group, chat_id=uuid.uuid4(), message_id=message.id
        ),
        "contact event to a stranger": OutboxIntent(
            "ContactRequestReceived", user, target_user_id=stranger.id, ref_id=contact.id
        ),
        "non-media row with a session kind": OutboxIntent(
            "ContactRemoved", user, target_user_id=bob.id, ref_id=contact.id, session_kind="Direct"
        ),
    }[case]
    publisher, (entry,) = dispatch(intent)
    assert publisher.events == []  # never pushed, not even once
    assert (entry.status, entry.attempts) == ("Quarantined", 1)
    assert entry.last_error is not None and entry.last_error.startswith(f"{error}:")
    assert "secret body" not in entry.last_error


def test_a_valid_row_next_to_a_broken_one_is_still_delivered() -> None:
    alice, _bob, chat, _call = chat_with_call()
    message = services.post_message(alice.id, chat.id, "fine")
    RealtimeOutboxEntry.objects.all().delete()
    group = RealtimeTargetKind.CHAT_GROUP
    publisher, entries = dispatch(
        OutboxIntent("MessageReceived", group, chat_id=chat.id, message_id=uuid.uuid4()),
        OutboxIntent("MessageReceived", group, chat_id=chat.id, message_id=message.id),
    )
    assert [e.status for e in entries] == ["Quarantined", "Done"]
    assert [e.payload["body"] for e in publisher.events] == ["fine"]


def test_a_file_message_carries_its_metadata_as_an_object() -> None:
    alice, _bob, chat, _call = chat_with_call()
    meta = {"name": "plan.pdf", "size": 1024, "mime": "application/pdf"}
    message = services.post_message(alice.id, chat.id, kind="File", file_meta=meta)
    RealtimeOutboxEntry.objects.exclude(message_id=message.id).delete()
    publisher = RecordingPublisher()
    run(one_pass(options(), publisher))
    assert [e.payload["fileMeta"] for e in publisher.events] == [meta]


def test_chat_events_carry_the_membership_version_and_a_users_join_names_the_chat() -> None:
    alice, bob, carol = (UserFactory(name=n) for n in ("alice", "bob", "carol"))
    chat = services.create_chat(alice.id, [bob.id], title="team")
    services.add_participant(alice.id, chat.id, carol.id)
    services.post_message(alice.id, chat.id, "hi")
    publisher = RecordingPublisher()
    run(one_pass(options(), publisher))
    by_target = [(e.target.kind, e.name, e.membership_version, e.joins) for e in publisher.events]
    assert ("chat", "message_received", 1, None) in by_target
    assert ("chat", "chat_updated", 1, None) in by_target  # read after the add: version 1
    joined = [(e.target.id, e.joins) for e in publisher.events if e.joins is not None]
    # Created with alice and bob, then carol added: each user's own row says so.
    assert sorted(joined) == sorted([(alice.id, chat.id), (bob.id, chat.id), (carol.id, chat.id)])
    user_events = [e for e in publisher.events if e.target.kind == "user"]
    assert all(e.membership_version is None for e in user_events)
