"""Owner use cases: each writes its domain change and its outbox rows in one transaction."""

from collections.abc import Iterable
from uuid import UUID

from django.db import transaction

from messenger_realtime import outbox
from messenger_realtime.control import membership_changed
from messenger_realtime.enums import RealtimeDispatchKind as Kind
from messenger_realtime.enums import RealtimeTargetKind as Target
from messenger_realtime.outbox import OutboxIntent

from .models import Chat, Message, Participant


class DomainError(Exception):
    """A use case refused (the REST layer turns it into a 4xx)."""

    status = 400


class NotFound(DomainError):
    status = 404


class Forbidden(DomainError):
    status = 403


def _active_participant(chat_id: UUID, user_id: UUID) -> Participant:
    """The caller's active participation; a non-participant learns nothing (404)."""
    try:
        return Participant.objects.get(chat_id=chat_id, user_id=user_id, is_active=True)
    except Participant.DoesNotExist as exc:
        raise NotFound("chat not found") from exc


def _membership_intents(chat_id: UUID, user_ids: Iterable[UUID]) -> list[OutboxIntent]:
    """ChatUpdated for the chat's group and for each user whose membership changed."""
    intents = [OutboxIntent(Kind.CHAT_UPDATED, Target.CHAT_GROUP, chat_id=chat_id)]
    intents += [
        OutboxIntent(Kind.CHAT_UPDATED, Target.USER, chat_id=chat_id, target_user_id=uid)
        for uid in user_ids
    ]
    return intents


def create_chat(creator_id: UUID, member_ids: Iterable[UUID], title: str = "") -> Chat:
    members = list(dict.fromkeys([creator_id, *member_ids]))
    kind = Chat.Kind.DIRECT if len(members) == 2 and not title else Chat.Kind.GROUP
    with transaction.atomic():
        chat = Chat.objects.create(title=title, kind=kind)
        Participant.objects.bulk_create([Participant(chat=chat, user_id=uid) for uid in members])
        outbox.enqueue_many(_membership_intents(chat.id, members))
        membership_changed(*members)
    return chat


def add_participant(actor_id: UUID, chat_id: UUID, user_id: UUID) -> Participant:
    with transaction.atomic():
        _active_participant(chat_id, actor_id)
        participant, _created = Participant.objects.update_or_create(
            chat_id=chat_id, user_id=user_id, defaults={"is_active": True}
        )
        outbox.enqueue_many(_membership_intents(chat_id, [user_id]))
        membership_changed(user_id)
    return participant


def remove_participant(actor_id: UUID, chat_id: UUID, user_id: UUID) -> None:
    with transaction.atomic():
        _active_participant(chat_id, actor_id)
        updated = Participant.objects.filter(
            chat_id=chat_id, user_id=user_id, is_active=True
        ).update(is_active=False)
        if not updated:
            raise NotFound("participant not found")
        outbox.enqueue_many(_membership_intents(chat_id, [user_id]))
        membership_changed(user_id)


def post_message(sender_id: UUID, chat_id: UUID, body: str) -> Message:
    if not body.strip():
        raise DomainError("body must not be empty")
    with transaction.atomic():
        _active_participant(chat_id, sender_id)
        # The chat row lock serialises senders of one chat: Seq is gapless and ordered.
        chat = Chat.objects.select_for_update().get(id=chat_id)
        chat.last_seq += 1
        chat.save(update_fields=["last_seq"])
        message = Message.objects.create(
            chat=chat, seq=chat.last_seq, sender_id=sender_id, body=body
        )
        outbox.enqueue(
            Kind.MESSAGE_RECEIVED,
            target_kind=Target.CHAT_GROUP,
            chat_id=chat_id,
            message_id=message.id,
            seq=message.seq,
        )
    return message
