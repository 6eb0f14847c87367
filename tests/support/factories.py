"""factory-boy factories for the host's domain rows and the realtime outbox.

Outbox timestamps follow the database clock (db_default=Now()), so the traits that move
them in time are Now() ± an interval, evaluated by PostgreSQL at INSERT.
"""

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import factory
from django.contrib.auth.models import Permission
from django.db import transaction
from django.db.models.functions import Now
from factory.django import DjangoModelFactory

from messenger_realtime import outbox
from messenger_realtime.conf.settings import load_options
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox import OutboxIntent
from messenger_realtime.outbox.enums import (
    RealtimeDispatchKind,
    RealtimeOutboxStatus,
    RealtimeTargetKind,
)
from project.messenger.models import Chat, Message, Participant, User

# Older than the default retention of Done rows (RETENTION_DONE, 24 hours).
LONG_AGO = timedelta(days=2)
# What a push to an unreachable channel layer records: exception class and errno, no PII.
LAYER_DOWN = "redis.exceptions.ConnectionError (code 111)"


def _max_attempts() -> int:
    return load_options().max_attempts


def _next_seq(chat: Chat) -> int:
    """The chat's next Seq, read from the database (the instance may be stale)."""
    chat.refresh_from_db(fields=["last_seq"])
    return chat.last_seq + 1


class UserFactory(DjangoModelFactory[User]):
    """UserFactory(name="alice"): username alice-<n>, display name alice."""

    class Meta:
        model = User
        skip_postgeneration_save = True

    class Params:
        name = "user"

    username = factory.LazyAttributeSequence(lambda o, n: f"{o.name}-{n}")
    display_name = factory.SelfAttribute("name")

    @factory.post_generation
    def permissions(obj: User, create: bool, extracted: Iterable[str] | None, **_: Any) -> None:
        """UserFactory(permissions=["view_realtimeoutboxentry"]) grants them by codename."""
        if create and extracted:
            obj.user_permissions.add(*(Permission.objects.get(codename=c) for c in extracted))


class ChatFactory(DjangoModelFactory[Chat]):
    class Meta:
        model = Chat
        skip_postgeneration_save = True

    kind = Chat.Kind.GROUP
    title = factory.Sequence(lambda n: f"chat {n}")

    @factory.post_generation
    def members(obj: Chat, create: bool, extracted: Iterable[User] | None, **_: Any) -> None:
        """ChatFactory(members=[alice, bob]) makes them its active participants."""
        for user in extracted or ():
            ParticipantFactory(chat=obj, user=user)


class ParticipantFactory(DjangoModelFactory[Participant]):
    class Meta:
        model = Participant

    chat = factory.SubFactory(ChatFactory)
    user = factory.SubFactory(UserFactory)


class MessageFactory(DjangoModelFactory[Message]):
    """The chat's next message: Seq is its last_seq + 1, and last_seq follows, as posting does."""

    class Meta:
        model = Message

    chat = factory.SubFactory(ChatFactory)
    sender = factory.SubFactory(UserFactory)
    seq = factory.LazyAttribute(lambda o: _next_seq(o.chat))
    body = factory.LazyAttribute(lambda o: f"body {o.seq}")

    @classmethod
    def _create(cls, model_class: type[Message], *args: Any, **kwargs: Any) -> Message:
        message = super()._create(model_class, *args, **kwargs)
        chat_id, seq = message.chat_id, message.seq
        Chat.objects.filter(id=chat_id, last_seq__lt=seq).update(last_seq=seq)
        return message


class OutboxEntryFactory(DjangoModelFactory[RealtimeOutboxEntry]):
    """A Pending MessageReceived row for its `message` (a new one unless given), due now."""

    # Traits: due_later (next attempt in an hour), long_ago (created and last updated
    # LONG_AGO), with_error (LAYER_DOWN), exhausted (attempts at MAX_ATTEMPTS, still
    # Pending), quarantined (exhausted, with_error, Quarantined), done (Done, 1 attempt).

    class Meta:
        model = RealtimeOutboxEntry

    class Params:
        message = factory.SubFactory(MessageFactory)
        due_later = factory.Trait(
            next_attempt_at=factory.LazyFunction(lambda: Now() + timedelta(hours=1))
        )
        long_ago = factory.Trait(
            created_at=factory.LazyFunction(lambda: Now() - LONG_AGO),
            updated_at=factory.LazyFunction(lambda: Now() - LONG_AGO),
        )
        with_error = factory.Trait(last_error=LAYER_DOWN)
        # Claimed MAX_ATTEMPTS times, never an outcome: still in flight (a suspect).
        exhausted = factory.Trait(
            attempts=factory.LazyFunction(_max_attempts), claimed_at=factory.LazyFunction(Now)
        )
        quarantined = factory.Trait(
            status=RealtimeOutboxStatus.QUARANTINED,
            attempts=factory.LazyFunction(_max_attempts),
            with_error=True,
        )
        done = factory.Trait(status=RealtimeOutboxStatus.DONE, attempts=1)

    kind = RealtimeDispatchKind.MESSAGE_RECEIVED
    target_kind = RealtimeTargetKind.CHAT_GROUP
    chat_id = factory.SelfAttribute("message.chat_id")
    message_id = factory.SelfAttribute("message.id")
    seq = factory.SelfAttribute("message.seq")

    @classmethod
    def _create(
        cls, model_class: type[RealtimeOutboxEntry], *args: Any, **kwargs: Any
    ) -> RealtimeOutboxEntry:
        entry = super()._create(model_class, *args, **kwargs)
        # Read back what the database filled in (defaults and Now() ± interval values).
        entry.refresh_from_db()
        return entry


def backlog(chat: Chat, count: int) -> list[Message]:
    """`count` messages in `chat` and their MessageReceived rows, committed in bulk (the
    real owner path: outbox.enqueue_many in the same transaction, one NOTIFY)."""
    sender = UserFactory()
    first = _next_seq(chat)
    with transaction.atomic():
        messages = Message.objects.bulk_create(
            Message(chat=chat, sender=sender, seq=seq, body=f"body {seq}")
            for seq in range(first, first + count)
        )
        Chat.objects.filter(id=chat.id).update(last_seq=first + count - 1)
        outbox.enqueue_many(
            OutboxIntent(
                RealtimeDispatchKind.MESSAGE_RECEIVED,
                chat_id=chat.id,
                message_id=m.id,
                seq=m.seq,
            )
            for m in messages
        )
    return messages
