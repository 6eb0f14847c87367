"""Who may reach whom, and sends that happen once: the blacklist enforced by every use
case that reaches another user, direct chats of exactly two, one live contact per pair,
and idempotent sends by clientMessageId, also when requests race (real PostgreSQL,
real concurrent connections)."""

import importlib
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections
from django.test import Client

from messenger_realtime.models import RealtimeOutboxEntry
from project.messenger import services
from project.messenger.models import Contact, Message
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for

RACERS = 8  # concurrent requests (each its own database connection)
contact_migration = importlib.import_module("project.messenger.migrations.0003_contact_live_pair")


class As:
    """Requests as one user, with the hub's JWT."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.id = str(user.id)
        self.client = Client(
            headers={"Authorization": f"Bearer {token_for(user.id)}"}, raise_request_exception=False
        )

    def __call__(self, method: str, path: str, data: Any = None) -> tuple[int, Any]:
        content = json.dumps(data) if data is not None else ""
        response = getattr(self.client, method.lower())(
            path, content, content_type="application/json"
        )
        return response.status_code, response.json() if response.content else None


def outbox_rows() -> int:
    return RealtimeOutboxEntry.objects.count()


# -- the blacklist ------------------------------------------------------------------


@pytest.fixture
def blocked() -> tuple[As, As, As, Any, Any]:
    """Alice blocked eve after they had a direct chat and a group chat with bob."""
    alice, bob, eve = (As(UserFactory(name=n)) for n in ("alice", "bob", "eve"))
    direct = services.create_chat(eve.user.id, [alice.user.id])
    group = services.create_chat(eve.user.id, [bob.user.id], title="eve and bob")
    services.set_blocked(alice.user.id, eve.user.id, True)
    return alice, bob, eve, direct, group


@pytest.mark.django_db
def test_a_blocked_user_cannot_reach_the_blocker_by_any_use_case(blocked: Any) -> None:
    alice, bob, eve, direct, group = blocked
    conference = services.start_conference(eve.user.id, group.id)
    services.add_participant(bob.user.id, group.id, alice.user.id)  # bob may add her
    before = outbox_rows()
    refusals = [
        ("POST", "/api/chats", {"memberIds": [alice.id]}, "a chat with them"),
        ("POST", "/api/chats", {"memberIds": [alice.id, bob.id], "title": "g"}, "a chat"),
        ("POST", f"/api/chats/{direct.id}/messages", {"body": "hi"}, "a message to them"),
        ("POST", f"/api/chats/{direct.id}/calls", None, "a call to them"),
        ("POST", f"/api/calls/{conference.id}/invite", {"userId": alice.id}, "an invitation"),
    ]
    for method, path, data, reason in refusals:
        status, body = eve(method, path, data)
        assert status == 403, (path, body)
        assert body["error"].startswith(reason) and "does not accept it from you" in body["error"]
    assert outbox_rows() == before  # nothing written, so the blocker is told nothing
    # Adding her to another chat: refused too.
    other = services.create_chat(eve.user.id, [bob.user.id], title="another")
    before = outbox_rows()
    status, body = eve("POST", f"/api/chats/{other.id}/participants", {"userId": alice.id})
    assert (status, outbox_rows()) == (403, before)
    # The blocker still reaches the blocked user, and an unblock lifts it all.
    assert alice("POST", f"/api/chats/{direct.id}/messages", {"body": "bye"})[0] == 201
    services.set_blocked(alice.user.id, eve.user.id, False)
    assert eve("POST", f"/api/chats/{direct.id}/messages", {"body": "sorry"})[0] == 201


@pytest.mark.django_db
def test_other_members_of_a_group_still_reach_each_other(blocked: Any) -> None:
    alice, bob, eve, _direct, group = blocked
    services.add_participant(bob.user.id, group.id, alice.user.id)
    # A group is not the blocker's: eve still posts there (alice filters on her client).
    assert eve("POST", f"/api/chats/{group.id}/messages", {"body": "to all"})[0] == 201


# -- direct chats -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_direct_chat_keeps_exactly_its_two_members() -> None:
    alice, bob, carol = (As(UserFactory(name=n)) for n in ("alice", "bob", "carol"))
    direct = services.create_chat(alice.user.id, [bob.user.id])
    services.post_message(alice.user.id, direct.id, "private")
    before = outbox_rows()
    for method, path, data in [
        ("POST", f"/api/chats/{direct.id}/participants", {"userId": carol.id}),
        ("DELETE", f"/api/chats/{direct.id}/participants/{bob.id}", None),
        ("PATCH", f"/api/chats/{direct.id}", {"title": "now a group"}),  # then add someone
    ]:
        status, body = alice(method, path, data)
        assert status == 409, (path, body)
        assert "direct chat" in body["error"]
    assert outbox_rows() == before
    assert carol("GET", f"/api/chats/{direct.id}/messages")[0] == 404
    status, chat = alice("GET", f"/api/chats/{direct.id}")
    assert (chat["kind"], len(chat["participants"])) == ("Direct", 2)


# -- contacts -----------------------------------------------------------------------


def race(count: int, request: Callable[[], tuple[int, Any]]) -> list[tuple[int, Any]]:
    """`count` requests at once, each on a thread with its own database connection."""
    barrier = threading.Barrier(count)
    results: list[tuple[int, Any]] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            barrier.wait(timeout=10)
            result = request()
            with lock:
                results.append(result)
        finally:
            connections.close_all()  # this thread's connection: never left open

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == count
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_contact_requests_make_one_contact() -> None:
    alice, bob = As(UserFactory(name="alice")), As(UserFactory(name="bob"))
    results = race(RACERS, lambda: alice("POST", "/api/contacts", {"userId": bob.id}))
    statuses = sorted(status for status, _ in results)
    assert statuses == [201] + [409] * (RACERS - 1)
    assert Contact.objects.count() == 1
    received = RealtimeOutboxEntry.objects.filter(
        kind="ContactRequestReceived", target_user_id=bob.user.id
    )
    assert received.count() == 1
    # The other way round while it is live: refused as well.
    assert bob("POST", "/api/contacts", {"userId": alice.id})[0] == 409


@pytest.mark.django_db
def test_the_migration_sets_aside_duplicate_live_contacts_but_the_first() -> None:
    alice, bob, carol = (UserFactory(name=n) for n in ("alice", "bob", "carol"))
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX uq_contact_live_pair")  # an expression: a unique index
        first = Contact.objects.create(requester=alice, addressee=bob)
        Contact.objects.create(requester=alice, addressee=bob)
        Contact.objects.create(requester=bob, addressee=alice, status="Accepted")
        alone = Contact.objects.create(requester=alice, addressee=carol)
        cursor.execute(contact_migration.SET_ASIDE_DUPLICATES)
    live = Contact.objects.filter(status__in=["Pending", "Accepted"])
    assert sorted(c.id for c in live) == sorted([first.id, alone.id])
    assert Contact.objects.filter(status="Removed").count() == 2


# -- idempotent sends ---------------------------------------------------------------


@pytest.mark.django_db
def test_a_retried_send_returns_the_first_message_and_writes_nothing() -> None:
    alice, bob = As(UserFactory(name="alice")), As(UserFactory(name="bob"))
    chat = services.create_chat(alice.user.id, [bob.user.id])
    send = {"body": "once", "clientMessageId": str(uuid.uuid4())}
    status, first = alice("POST", f"/api/chats/{chat.id}/messages", send)
    before = (Message.objects.count(), outbox_rows())
    status_again, again = alice("POST", f"/api/chats/{chat.id}/messages", send)
    assert (status, status_again) == (201, 200)
    assert (again["messageId"], again["seq"]) == (first["messageId"], first["seq"])
    assert again["clientMessageId"] == send["clientMessageId"]
    assert (Message.objects.count(), outbox_rows()) == before
    # The same id is the sender's own: bob may use it too, and gets his own message.
    status, bobs = bob("POST", f"/api/chats/{chat.id}/messages", send)
    assert status == 201 and bobs["messageId"] != first["messageId"]
    # In another chat the same id is a mistake, not a retry.
    other = services.create_chat(alice.user.id, [bob.user.id], title="other")
    status, body = alice("POST", f"/api/chats/{other.id}/messages", send)
    assert status == 409 and "clientMessageId" in body["error"]
    assert alice("POST", f"/api/chats/{chat.id}/messages", {"body": "x", "clientMessageId": "7"})[
        1
    ] == {"error": "clientMessageId must be a UUID"}


@pytest.mark.django_db(transaction=True)
def test_racing_retries_of_one_send_make_one_message() -> None:
    alice, bob = As(UserFactory(name="alice")), As(UserFactory(name="bob"))
    chat = services.create_chat(alice.user.id, [bob.user.id])
    send = {"body": "once", "clientMessageId": str(uuid.uuid4())}
    results = race(RACERS, lambda: alice("POST", f"/api/chats/{chat.id}/messages", send))
    assert sorted(status for status, _ in results) == [200] * (RACERS - 1) + [201]
    assert len({body["messageId"] for _, body in results}) == 1
    assert Message.objects.filter(chat=chat).count() == 1
    assert RealtimeOutboxEntry.objects.filter(chat_id=chat.id, kind="MessageReceived").count() == 1


@pytest.mark.django_db(transaction=True)
def test_one_id_racing_into_two_chats_makes_one_message() -> None:
    alice, bob = As(UserFactory(name="alice")), As(UserFactory(name="bob"))
    chats = [services.create_chat(alice.user.id, [bob.user.id], title=f"c{n}") for n in (1, 2)]
    send = {"body": "once", "clientMessageId": str(uuid.uuid4())}
    turn = iter(range(RACERS))
    lock = threading.Lock()

    def post() -> tuple[int, Any]:
        with lock:
            chat = chats[next(turn) % 2]
        return alice("POST", f"/api/chats/{chat.id}/messages", send)

    results = race(RACERS, post)
    assert {status for status, _ in results} <= {200, 201, 409}
    assert [status for status, _ in results].count(201) == 1
    assert Message.objects.filter(client_message_id=send["clientMessageId"]).count() == 1
