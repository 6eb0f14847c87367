"""Messages: post (gapless per-chat Seq), edit within 60 s, delete."""

from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from messenger_realtime import outbox
from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.outbox.enums import RealtimeDispatchKind

from ..models import Chat, Message, Participant
from .blocking import refuse_if_blocked
from .chats import active_participant
from .errors import Conflict, Forbidden, InvalidInput, NotFound

EDIT_WINDOW = timedelta(seconds=60)


def _content(kind: str, body: str, file_meta: Any, card_text: str) -> dict[str, Any]:
    # A body or a card's text: at most CONTENT_MAX_STRING characters (docs/api.md).
    max_body = load_hub_options().content_max_string
    if kind == Message.Kind.TEXT:
        if not body.strip() or len(body) > max_body:
            raise InvalidInput(f"body must be 1-{max_body} characters")
        return {"body": body}
    if kind == Message.Kind.FILE:
        if not isinstance(file_meta, dict) or not file_meta.get("name"):
            raise InvalidInput("fileMeta must be an object with at least a name")
        return {"file_meta": file_meta}
    if kind == Message.Kind.CARD:
        if not card_text.strip() or len(card_text) > max_body:
            raise InvalidInput(f"cardText must be 1-{max_body} characters")
        return {"card_text": card_text}
    raise InvalidInput(f"kind must be one of {', '.join(Message.Kind.values)}")


def _members(chat_id: UUID) -> list[UUID]:
    rows = Participant.objects.filter(chat_id=chat_id, is_active=True)
    return list(rows.values_list("user_id", flat=True))


def post_message(sender_id: UUID, chat_id: UUID, body: str = "", **content: Any) -> Message:
    """Post a message; `content` as post_once's (kind, file_meta, card_text,
    client_message_id)."""
    return post_once(sender_id, chat_id, body, **content)[0]


def post_once(
    sender_id: UUID,
    chat_id: UUID,
    body: str = "",
    *,
    kind: str = "Text",
    file_meta: Any = None,
    card_text: str = "",
    client_message_id: UUID | None = None,
) -> tuple[Message, bool]:
    """(the message, whether this call posted it). With a client_message_id the sender
    already used, nothing is written and the first message comes back, also when the
    retries race: they queue on the chat's row lock, and each reads after the one before
    it committed. The same id for another chat is a Conflict."""
    content = _content(kind, body, file_meta, card_text)
    with transaction.atomic():
        sender = active_participant(chat_id, sender_id)
        if not sender.took_part:  # the first message: the others may now see their presence
            Participant.objects.filter(pk=sender.pk).update(took_part=True)
        # The chat row lock serialises senders of one chat: Seq is gapless and ordered.
        chat = Chat.objects.select_for_update().get(id=chat_id)
        if client_message_id is not None:
            sent = Message.objects.filter(
                sender_id=sender_id, client_message_id=client_message_id
            ).first()
            if sent is not None and sent.chat_id == chat_id:
                return sent, False
            if sent is not None:
                raise Conflict("clientMessageId was already used for a message in another chat")
        if chat.kind == Chat.Kind.DIRECT:
            refuse_if_blocked(sender_id, _members(chat_id), "a message to them")
        chat.last_seq += 1
        chat.save(update_fields=["last_seq"])
        try:
            with transaction.atomic():  # a savepoint: the constraint may refuse the insert
                message = Message.objects.create(
                    chat=chat,
                    seq=chat.last_seq,
                    sender_id=sender_id,
                    kind=kind,
                    client_message_id=client_message_id,
                    **content,
                )
        except IntegrityError as exc:
            # uq_message_sender_client_id: the same id raced in through another chat
            # (each holds its own chat's lock); the one that lost writes nothing.
            raise Conflict(
                "clientMessageId was already used for a message in another chat"
            ) from exc
        outbox.enqueue(
            RealtimeDispatchKind.MESSAGE_RECEIVED,
            chat_id=chat_id,
            message_id=message.id,
            seq=message.seq,
        )
    return message, True


def _own_message(sender_id: UUID, chat_id: UUID, message_id: UUID) -> Message:
    active_participant(chat_id, sender_id)
    try:
        message = Message.objects.select_for_update().get(id=message_id, chat_id=chat_id)
    except Message.DoesNotExist as exc:
        raise NotFound("message not found") from exc
    if message.sender_id != sender_id:
        raise Forbidden("only the sender may change a message")
    if message.deleted_at is not None:
        raise NotFound("message not found")
    return message


def edit_message(sender_id: UUID, chat_id: UUID, message_id: UUID, body: str) -> Message:
    content = _content(Message.Kind.TEXT, body, None, "")
    with transaction.atomic():
        message = _own_message(sender_id, chat_id, message_id)
        if message.kind != Message.Kind.TEXT:
            raise InvalidInput("only text messages can be edited")
        # The window is measured on the database clock, like sent_at itself.
        edited = Message.objects.filter(id=message.id, sent_at__gte=Now() - EDIT_WINDOW).update(
            body=content["body"], edited_at=Now()
        )
        if not edited:
            raise Forbidden("messages can be edited within 60 seconds of sending")
        message.refresh_from_db()
        outbox.enqueue(
            RealtimeDispatchKind.MESSAGE_EDITED,
            chat_id=chat_id,
            message_id=message.id,
            seq=message.seq,
        )
    return message


def delete_message(sender_id: UUID, chat_id: UUID, message_id: UUID) -> Message:
    with transaction.atomic():
        message = _own_message(sender_id, chat_id, message_id)
        # The content is gone with the message; the row stays so Seq has no gap.
        Message.objects.filter(id=message.id).update(
            deleted_at=Now(), body="", card_text="", file_meta=None
        )
        message.refresh_from_db()
        outbox.enqueue(
            RealtimeDispatchKind.MESSAGE_DELETED,
            chat_id=chat_id,
            message_id=message.id,
            seq=message.seq,
        )
    return message
