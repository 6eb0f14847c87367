"""camelCase JSON for the REST API (the same field names as the realtime contracts)."""

from typing import Any

from messenger_realtime.contracts.base import iso
from messenger_realtime.hub.media_credentials import media_join

from ..models import CallParticipant, CallSession, Chat, Contact, Message, Participant, Recording


def message(m: Message) -> dict[str, Any]:
    data: dict[str, Any] = {
        "chatId": str(m.chat_id),
        "messageId": str(m.id),
        "seq": m.seq,
        "kind": m.kind,
        "senderUserId": str(m.sender_id) if m.sender_id else None,
        "sentAt": iso(m.sent_at),
        "editedAt": iso(m.edited_at),
        "deletedAt": iso(m.deleted_at),
        "clientMessageId": str(m.client_message_id) if m.client_message_id else None,
    }
    if m.deleted_at is None:
        data.update(body=m.body, fileMeta=m.file_meta, cardText=m.card_text)
    return data


def participant(p: Participant) -> dict[str, Any]:
    return {
        "userId": str(p.user_id),
        "displayName": p.user.display_name or p.user.username,
        "lastReadSeq": p.last_read_seq,
        "active": p.is_active,
    }


def chat(c: Chat, participants: list[Participant], offset: int) -> dict[str, Any]:
    """A chat, with its stream's offset: where a client that loaded it recovers from."""
    return {
        "chatId": str(c.id),
        "kind": c.kind,
        "title": c.title,
        "lastSeq": c.last_seq,
        "participants": [participant(p) for p in participants if p.is_active],
        **stream(f"chat:{c.id}", offset),
    }


def stream(name: str, offset: int) -> dict[str, Any]:
    """A stream and its offset (hub `Recover`: docs/hub.md, "Recovery")."""
    return {"stream": name, "offset": offset}


def contact(c: Contact) -> dict[str, Any]:
    return {
        "contactId": str(c.id),
        "requesterUserId": str(c.requester_id),
        "addresseeUserId": str(c.addressee_id),
        "status": c.status,
    }


def call(c: CallSession) -> dict[str, Any]:
    return {
        "callId": str(c.id),
        "sessionKind": c.session_kind,
        "chatId": str(c.chat_id),
        "status": c.status,
        "initiatorUserId": str(c.initiator_id),
        "calleeUserId": str(c.callee_id) if c.callee_id else None,
        "createdAt": iso(c.created_at),
        "answeredAt": iso(c.answered_at),
        "endedAt": iso(c.ended_at),
    }


def call_with_media(c: CallSession, user_id: Any) -> dict[str, Any]:
    """The session plus the caller's own MediaJoinModel, minted for this response only."""
    from messenger_realtime.conf.settings import load_hub_options

    return {**call(c), "media": media_join(c.room_name, user_id, load_hub_options())}


def call_participant(p: CallParticipant) -> dict[str, Any]:
    return {
        "participantId": str(p.id),
        "callId": str(p.call_id),
        "userId": str(p.user_id),
        "joinedAt": iso(p.joined_at),
        "leftAt": iso(p.left_at),
        "screenSharing": p.screen_sharing,
    }


def recording(r: Recording) -> dict[str, Any]:
    return {
        "recordingId": str(r.id),
        "callId": str(r.call_id),
        "status": r.status,
        "fileUrl": r.file_url or None,
        "failureCode": r.failure_code or None,
    }
