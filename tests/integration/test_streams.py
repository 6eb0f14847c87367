"""Streams: every intent gets the next offset of its hub group's stream in the owner's
transaction, gap-free and in commit order, and the pushed payload names both."""

import threading
import uuid
from typing import Any

import psycopg
import pytest
from django.db import transaction

from messenger_realtime import outbox
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.dispatch import connections as db
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox import OutboxIntent
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind
from messenger_realtime.outbox.streams import NEXT_OFFSETS, current_offsets, stream_name
from project.messenger import services
from tests.support.dispatch import one_pass
from tests.support.factories import UserFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")
UPDATED = RealtimeDispatchKind.CHAT_UPDATED


def to_chat(chat: uuid.UUID) -> OutboxIntent:
    return OutboxIntent(UPDATED, chat_id=chat)


def to_user(user: uuid.UUID) -> OutboxIntent:
    return OutboxIntent(UPDATED, RealtimeTargetKind.USER, target_user_id=user)


def test_each_stream_counts_its_own_intents_from_one_in_the_order_written() -> None:
    a, b, user = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with transaction.atomic():
        first = outbox.enqueue_many([to_chat(a), to_chat(b), to_chat(a), to_user(user)])
    with transaction.atomic():
        second = outbox.enqueue_many([to_chat(a), to_user(user)])
    assert [e.stream_offset for e in first] == [1, 1, 2, 1]
    assert [e.stream_offset for e in second] == [3, 2]
    stored = {e.id: e.stream_offset for e in RealtimeOutboxEntry.objects.all()}
    assert stored == {e.id: e.stream_offset for e in first + second}
    names = [f"chat:{a}", f"chat:{b}", f"user:{user}", f"chat:{uuid.uuid4()}"]
    assert current_offsets(names) == dict(zip(names, [3, 1, 2, 0], strict=True))


def test_a_rolled_back_intent_leaves_no_gap() -> None:
    chat = uuid.uuid4()

    class OwnerFailed(Exception):
        pass

    with pytest.raises(OwnerFailed), transaction.atomic():
        outbox.enqueue(UPDATED, chat_id=chat)
        raise OwnerFailed
    with transaction.atomic():
        entry = outbox.enqueue(UPDATED, chat_id=chat)
    assert entry.stream_offset == 1


def test_the_stream_name_is_the_hub_group_name() -> None:
    chat, user = uuid.uuid4(), uuid.uuid4()
    assert stream_name(RealtimeTargetKind.CHAT_GROUP, chat, None) == str(HubTarget.chat(chat))
    assert stream_name(RealtimeTargetKind.USER, chat, user) == str(HubTarget.user(user))


def take(conn: psycopg.Connection[Any], stream: str) -> int:
    row = conn.execute(NEXT_OFFSETS, {"streams": [stream], "counts": [1]}).fetchone()
    assert row is not None
    return int(row[1])


def test_writers_of_one_stream_commit_in_turn_and_other_streams_never_wait() -> None:
    """The second writer of a stream waits for the first's commit (so offsets follow the
    commit order with no gap), a writer of another stream does not wait at all."""
    stream, other = f"chat:{uuid.uuid4()}", f"chat:{uuid.uuid4()}"
    with (
        psycopg.connect(db.conninfo()) as first,
        psycopg.connect(db.conninfo()) as second,
        psycopg.connect(db.conninfo()) as third,
        psycopg.connect(db.conninfo(), autocommit=True) as watch,
    ):
        assert take(first, stream) == 1
        assert take(third, other) == 1  # not blocked by `first`
        taken: list[int] = []
        pid = second.info.backend_pid
        waiter = threading.Thread(target=lambda: taken.append(take(second, stream)))
        waiter.start()
        # Wait until the second writer is seen waiting on the first's lock (no sleep).
        waiting = "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
        while watch.execute(waiting, [pid]).fetchone() is None:
            pass
        assert taken == []
        first.rollback()  # the first writer's offset is given back: no gap
        waiter.join(timeout=10)
        assert taken == [1]
        second.commit()
        third.commit()


def test_the_pushed_payload_names_its_stream_and_offset() -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    chat = services.create_chat(alice.id, [bob.id], title="team")
    sent = services.post_message(alice.id, chat.id, "hello")
    publisher = RecordingPublisher()
    run(one_pass(options(), publisher))
    received = [e for e in publisher.events if e.name == "message_received"]
    assert [e.payload["messageId"] for e in received] == [str(sent.id)]
    entry = RealtimeOutboxEntry.objects.get(message_id=sent.id, kind="MessageReceived")
    assert received[0].payload["stream"] == f"chat:{chat.id}"
    assert received[0].payload["offset"] == entry.stream_offset >= 1
