"""The host's use cases: each writes its outbox rows in its own transaction (step 5)."""

from uuid import UUID

from django.db import transaction
from django.db.models import F

from chat.models import Chat, ChatEvent, Member, Message
from messenger_realtime import outbox
from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeDispatchKind, RealtimeTargetKind


def create_chat(creator: UUID, title: str, members: list[UUID]) -> Chat:
    with transaction.atomic():
        chat = Chat.objects.create(title=title, membership_version=1)
        for user_id in [creator, *members]:
            Member.objects.create(chat=chat, user_id=user_id)
        event = ChatEvent.objects.create(chat=chat, kind="ChatCreated", actor_id=creator)
        outbox.enqueue(RealtimeDispatchKind.CHAT_UPDATED, chat_id=chat.id, ref_id=event.id)
    return chat


def post_message(chat_id: UUID, sender: UUID, body: str) -> tuple[Message, RealtimeOutboxEntry]:
    """The message and its outbox row commit together, or neither does."""
    with transaction.atomic():
        Chat.objects.filter(id=chat_id).update(last_seq=F("last_seq") + 1)
        seq = Chat.objects.values_list("last_seq", flat=True).get(id=chat_id)
        message = Message.objects.create(chat_id=chat_id, seq=seq, sender_id=sender, body=body)
        entry = outbox.enqueue(
            RealtimeDispatchKind.MESSAGE_RECEIVED,
            target_kind=RealtimeTargetKind.CHAT_GROUP,
            chat_id=chat_id,
            message_id=message.id,
            seq=seq,
        )
    return message, entry
