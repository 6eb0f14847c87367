"""Chat contracts: messages (bodies only ever to chat:{ChatId}), read receipts, updates."""

from uuid import UUID

from messenger_realtime.contracts.base import (
    Contract,
    Payload,
    compact,
    ids,
    iso,
    no_session_kind,
    require_chat_group,
)
from messenger_realtime.contracts.events import OutboxRow
from messenger_realtime.contracts.port import ChatEventView, MessageView, ParticipantView
from messenger_realtime.exceptions import InvalidRow
from messenger_realtime.outbox.enums import RealtimeDispatchKind as K
from messenger_realtime.outbox.enums import RealtimeTargetKind


def _message_base(row: OutboxRow, m: MessageView) -> Payload:
    no_session_kind(row)
    require_chat_group(row, m.chat_id)  # the PII rule: content only to the chat's members
    if row.seq is not None and row.seq != m.seq:
        raise InvalidRow("ReferenceMismatch: Seq differs from the message's")
    return {**ids(chatId=m.chat_id, messageId=m.id), "seq": m.seq}


def message_received(row: OutboxRow, m: MessageView) -> Payload:
    payload = _message_base(row, m)
    payload.update(ids(senderUserId=m.sender_user_id))
    payload.update(kind=m.kind, sentAt=iso(m.sent_at))
    if m.deleted_at is not None:  # deleted before its push: the event, not the content
        return compact({**payload, "deletedAt": iso(m.deleted_at)})
    content = {
        "Text": ("body", m.body),
        "File": ("fileMeta", m.file_meta),
        "Card": ("cardText", m.card_text),
    }
    field, value = content.get(m.kind, ("body", m.body))
    return compact({**payload, field: value})


def message_edited(row: OutboxRow, m: MessageView) -> Payload:
    payload = _message_base(row, m)
    if m.deleted_at is not None:
        return compact({**payload, "deletedAt": iso(m.deleted_at)})
    return compact({**payload, "body": m.body, "editedAt": iso(m.edited_at)})


def message_deleted(row: OutboxRow, m: MessageView) -> Payload:
    payload = _message_base(row, m)
    if m.deleted_at is None:
        raise InvalidRow("StateMismatch: MessageDeleted for a message that is not deleted")
    return {**payload, "deletedAt": iso(m.deleted_at)}


def read_receipt_updated(row: OutboxRow, p: ParticipantView) -> Payload:
    no_session_kind(row)
    require_chat_group(row, p.chat_id)
    return {**ids(chatId=p.chat_id, userId=p.user_id), "lastReadSeq": p.last_read_seq}


def chat_updated(row: OutboxRow, e: ChatEventView) -> Payload:
    no_session_kind(row)
    if row.target_kind == RealtimeTargetKind.CHAT_GROUP:
        require_chat_group(row, e.chat_id)
    elif row.chat_id not in (None, e.chat_id):
        raise InvalidRow("ReferenceMismatch: ChatUpdated refers to another chat")
    payload: Payload = {
        **ids(
            chatId=e.chat_id,
            chatEventId=e.id,
            actorUserId=e.actor_user_id,
            userId=e.subject_user_id,
        ),
        "change": e.kind,
        "at": iso(e.created_at),
    }
    if e.kind == "TitleChanged":
        payload["title"] = e.title
    return payload


def joined_chat(row: OutboxRow, e: ChatEventView) -> UUID | None:
    """The chat a user-targeted ChatUpdated says its user joined (created with them, or
    added), so the user's connections join its group before the event is pushed."""
    if row.target_kind != RealtimeTargetKind.USER or row.target_user_id is None:
        return None
    if e.kind == "ChatCreated" or (
        e.kind == "ParticipantAdded" and e.subject_user_id == row.target_user_id
    ):
        return e.chat_id
    return None


CONTRACTS: dict[str, Contract] = {
    K.MESSAGE_RECEIVED: Contract("message_id", message_received),
    K.MESSAGE_EDITED: Contract("message_id", message_edited),
    K.MESSAGE_DELETED: Contract("message_id", message_deleted),
    K.READ_RECEIPT_UPDATED: Contract("ref_id", read_receipt_updated),
    K.CHAT_UPDATED: Contract("ref_id", chat_updated, joins=joined_chat),
}
