"""enqueue(): in the owner's transaction, with one NOTIFY delivered only at commit."""

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import transaction

from messenger_realtime import outbox
from messenger_realtime.dispatch import connections as db
from messenger_realtime.exceptions import TransactionRequired
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox import OutboxIntent
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind, SessionKind


@pytest.fixture
def listener(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """A real LISTEN realtime_outbox session, as the worker has."""
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute("LISTEN realtime_outbox")
        yield conn


def notifications(conn: psycopg.Connection[Any], timeout: float) -> list[str]:
    return [n.channel for n in conn.notifies(timeout=timeout)]


def test_enqueue_outside_a_transaction_raises_and_writes_nothing(transactional_db: None) -> None:
    with pytest.raises(TransactionRequired, match=r"transaction\.atomic"):
        outbox.enqueue("MessageReceived", chat_id=uuid.uuid4())
    assert RealtimeOutboxEntry.objects.count() == 0


def test_commit_writes_the_row_and_sends_one_notify(listener: psycopg.Connection[Any]) -> None:
    chat, message = uuid.uuid4(), uuid.uuid4()
    with transaction.atomic():
        entry = outbox.enqueue(
            RealtimeDispatchKind.MESSAGE_RECEIVED, chat_id=chat, message_id=message, seq=7
        )
        outbox.enqueue(RealtimeDispatchKind.CHAT_UPDATED, chat_id=chat)
        assert notifications(listener, timeout=0.2) == []  # nothing before commit
    assert notifications(listener, timeout=2) == ["realtime_outbox"]
    stored = RealtimeOutboxEntry.objects.get(id=entry.id)
    assert (stored.kind, stored.chat_id, stored.message_id, stored.seq) == (
        "MessageReceived",
        chat,
        message,
        7,
    )
    assert (stored.status, stored.attempts, stored.id.version) == ("Pending", 0, 7)


def test_rollback_leaves_no_row_and_no_notification(listener: psycopg.Connection[Any]) -> None:
    class OwnerFailed(Exception):
        pass

    with pytest.raises(OwnerFailed), transaction.atomic():
        outbox.enqueue(RealtimeDispatchKind.MESSAGE_RECEIVED, chat_id=uuid.uuid4())
        raise OwnerFailed
    assert RealtimeOutboxEntry.objects.count() == 0
    assert notifications(listener, timeout=0.5) == []


def test_enqueue_many_writes_all_rows_with_one_notification(
    listener: psycopg.Connection[Any],
) -> None:
    user = uuid.uuid4()
    intents = [
        OutboxIntent(
            "CallInvited",
            RealtimeTargetKind.USER,
            target_user_id=user,
            ref_id=uuid.uuid4(),
            session_kind=SessionKind.DIRECT,
        ),
        OutboxIntent("ContactRequestReceived", RealtimeTargetKind.USER, target_user_id=user),
    ]
    with transaction.atomic():
        entries = outbox.enqueue_many(intents)
    assert notifications(listener, timeout=2) == ["realtime_outbox"]
    assert RealtimeOutboxEntry.objects.filter(id__in=[e.id for e in entries]).count() == 2


@pytest.mark.parametrize(
    ("intent", "reason"),
    [
        (OutboxIntent("MessageSent", chat_id=uuid.uuid4()), "unknown RealtimeDispatchKind"),
        (OutboxIntent("MessageReceived"), "needs chat_id"),
        (OutboxIntent("CallInvited", RealtimeTargetKind.USER), "needs target_user_id"),
        (OutboxIntent("CallInvited", "Room", chat_id=uuid.uuid4()), "unknown RealtimeTargetKind"),
        (OutboxIntent("CallInvited", chat_id=uuid.uuid4(), session_kind="Video"), "SessionKind"),
    ],
)
def test_invalid_intent_is_refused_with_a_reason_and_nothing_is_written(
    transactional_db: None, intent: OutboxIntent, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason), transaction.atomic():
        outbox.enqueue_many([intent])
    assert RealtimeOutboxEntry.objects.count() == 0
