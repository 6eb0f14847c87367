"""Recovery from the database (the `Recover` hub method) with real processes: two Daphnes,
the worker, PostgreSQL, Redis and the official JavaScript client.

A client that was away names the last offset it holds per stream; the hub sends every
missed event of each stream before the completion, which says per stream "recovered",
"resync" or "forbidden" (docs/hub.md, "Recovery")."""

import threading
from typing import Any

import pytest

from messenger_realtime.models import RealtimeOutboxEntry
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.hub_clients import HubClient, TwoHubs
from tests.support.hub_helpers import token_for
from tests.support.runtime import wait_until
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


def connect(daphne: DaphneProcess, user: Any, env: dict[str, str]) -> HubClient:
    url = f"{daphne.http}/hubs/messenger"
    client = HubClient("@microsoft/signalr", url, token_for(user.id), env)
    client.next("state", "connected")
    return client


def offsets(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["payload"]["offset"]) for e in events]


def chat_and_first_message(hubs: TwoHubs) -> tuple[Any, Any, Any, str, int]:
    """Alice and Bob in a chat; Bob, on the first Daphne, got its first message live.
    Returns (alice, bob, chat, the chat's stream, the offset Bob holds)."""
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id], title="team")
    stream = f"chat:{chat.id}"
    first = connect(hubs.daphnes[0], bob, hubs.env)
    services.post_message(alice.id, chat.id, "one")
    held = first.next("event", "message_received")["payload"]
    assert (held["body"], held["stream"]) == ("one", stream)
    first.kill()  # away from here on
    return alice, bob, chat, stream, int(held["offset"])


def test_a_client_back_on_the_other_daphne_gets_what_it_missed_edits_and_deletes_too(
    hubs: TwoHubs,
) -> None:
    alice, bob, chat, stream, held = chat_and_first_message(hubs)
    two = services.post_message(alice.id, chat.id, "two")
    three = services.post_message(alice.id, chat.id, "three")
    services.edit_message(alice.id, chat.id, two.id, "two, edited")
    services.delete_message(alice.id, chat.id, three.id)
    back = connect(hubs.daphnes[1], bob, hubs.env)
    assert back.recover({stream: held}) == {stream: "recovered"}
    got = back.stream_events(stream)
    assert offsets(got) == list(range(held + 1, held + 5))
    assert [e["event"] for e in got] == [
        "message_received",
        "message_received",
        "message_edited",
        "message_deleted",
    ]
    # Built as the worker builds them now: the deleted message's content is not resent.
    assert got[0]["payload"]["body"] == "two, edited"
    assert "body" not in got[1]["payload"] and got[1]["payload"]["deletedAt"]
    assert got[2]["payload"]["body"] == "two, edited"
    assert got[3]["payload"]["messageId"] == str(three.id)


@pytest.mark.own_processes  # it kills the worker and both Daphnes
def test_recovery_serves_from_the_database_with_the_worker_stopped_and_both_hubs_restarted(
    hubs: TwoHubs,
) -> None:
    alice, bob, chat, stream, held = chat_and_first_message(hubs)
    hubs.worker.kill()  # committed from here on, never pushed
    for daphne in hubs.daphnes:
        daphne.kill()
    for message in ("two", "three"):
        services.post_message(alice.id, chat.id, message)
    pending = RealtimeOutboxEntry.objects.filter(chat_id=chat.id, status="Pending")
    assert pending.count() == 2
    hubs.daphnes = [DaphneProcess(hubs.env) for _ in range(2)]
    back = connect(hubs.daphnes[1], bob, hubs.env)
    user_stream = f"user:{bob.id}"
    result = back.recover({stream: held, user_stream: 0})
    assert result == {stream: "recovered", user_stream: "recovered"}
    got = back.stream_events(stream)
    assert [e["payload"]["body"] for e in got] == ["two", "three"]
    assert offsets(got) == [held + 1, held + 2]
    assert pending.count() == 2  # recovery reads; it never marks a row


def test_a_member_removed_while_away_is_forbidden_and_gets_none_of_the_chat(
    hubs: TwoHubs,
) -> None:
    alice, bob, chat, stream, held = chat_and_first_message(hubs)
    carol = UserFactory(name="carol")
    services.add_participant(alice.id, chat.id, carol.id)
    services.post_message(alice.id, chat.id, "bob may still see this")
    services.remove_participant(alice.id, chat.id, bob.id)
    services.post_message(alice.id, chat.id, "after bob left")
    back = connect(hubs.daphnes[1], bob, hubs.env)
    assert back.recover({stream: held}) == {stream: "forbidden"}
    watcher = connect(hubs.daphnes[1], alice, hubs.env)
    services.post_message(alice.id, chat.id, "later still")
    assert watcher.message()["body"] == "later still"  # pushed live by now
    assert back.stream_events(stream) == []
    # Another user's stream is never readable either.
    assert back.recover({f"user:{alice.id}": 0}) == {f"user:{alice.id}": "forbidden"}


@pytest.fixture
def hub_env(worker_env: dict[str, str]) -> dict[str, str]:
    return dict(worker_env, MESSENGER_REALTIME_RECOVERY_MAX_EVENTS="3")


@pytest.mark.own_processes  # hubs with another RECOVERY_MAX_EVENTS, started in the test
def test_a_client_further_behind_than_recovery_max_events_is_told_to_resync(
    hub_env: dict[str, str],
) -> None:
    hubs = TwoHubs(hub_env)
    try:
        alice, bob, chat, stream, held = chat_and_first_message(hubs)
        for n in range(4):
            services.post_message(alice.id, chat.id, f"missed {n}")
        back = connect(hubs.daphnes[1], bob, hubs.env)
        assert back.recover({stream: held}) == {stream: "resync"}
        assert back.recover({stream: held + 1}) == {stream: "recovered"}  # 3 missed
        assert offsets(back.stream_events(stream)) == [held + 2, held + 3, held + 4]
        # Gone from the database (retention): resync, not a silent gap.
        RealtimeOutboxEntry.objects.filter(chat_id=chat.id).delete()
        assert back.recover({stream: held + 2}) == {stream: "resync"}
        assert back.recover({stream: held + 4}) == {stream: "recovered"}  # nothing missed
        assert back.recover({stream: held + 99}) == {stream: "resync"}  # ahead of the db
    finally:
        hubs.close()


def test_live_events_during_a_recovery_follow_the_recovered_ones_each_offset_once(
    hubs: TwoHubs,
) -> None:
    alice, bob, chat, stream, held = chat_and_first_message(hubs)
    for n in range(20):
        services.post_message(alice.id, chat.id, f"missed {n}")
    back = connect(hubs.daphnes[1], bob, hubs.env)
    posted = threading.Event()

    def post_live() -> None:
        from django.db import connection

        try:
            for n in range(40):
                services.post_message(alice.id, chat.id, f"live {n}")
        finally:
            connection.close()
            posted.set()

    poster = threading.Thread(target=post_live)
    poster.start()
    assert back.recover({stream: held}) == {stream: "recovered"}
    poster.join(timeout=60)
    assert posted.is_set()
    last = held + 60
    wait_until(
        lambda: offsets(back.stream_events(stream))[-1:] == [last],
        timeout=30,
        what="every event up to the last one posted",
    )
    assert offsets(back.stream_events(stream)) == list(range(held + 1, last + 1))
