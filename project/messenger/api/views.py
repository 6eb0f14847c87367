"""REST endpoints (JSON, camelCase). Each write is one owner use case: the domain change
and its outbox rows commit together. docs/api.md lists them all."""

from typing import Any
from uuid import UUID

from django.http import HttpRequest

from .. import services
from ..models import Chat, Message, Participant
from . import serializers as out
from .base import BadRequest, body, endpoint, int_of, text_of, uuid_of

MAX_PAGE = 200
R = HttpRequest


def _members(data: dict[str, Any]) -> list[UUID]:
    raw = data.get("memberIds")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("memberIds must be a non-empty list of user ids")
    return [uuid_of({"memberIds": item}, "memberIds") for item in raw]


def _chat_out(chat_id: UUID) -> dict[str, Any]:
    chat = Chat.objects.get(id=chat_id)
    return out.chat(chat, list(Participant.objects.filter(chat_id=chat_id).select_related("user")))


def list_chats(user: UUID, request: R) -> Any:
    chat_ids = Participant.objects.filter(user_id=user, is_active=True).values("chat_id")
    return {"chats": [_chat_out(c.id) for c in Chat.objects.filter(id__in=chat_ids)]}


def create_chat(user: UUID, request: R) -> Any:
    data = body(request)
    chat = services.create_chat(user, _members(data), title=text_of(data, "title", ""))
    return 201, _chat_out(chat.id)


def get_chat(user: UUID, request: R, chat_id: UUID) -> Any:
    services.chats.active_participant(chat_id, user)
    return _chat_out(chat_id)


def rename_chat(user: UUID, request: R, chat_id: UUID) -> Any:
    services.rename_chat(user, chat_id, text_of(body(request), "title"))
    return _chat_out(chat_id)


def list_messages(user: UUID, request: R, chat_id: UUID) -> Any:
    services.chats.active_participant(chat_id, user)
    after = int_of(dict(request.GET.items()), "afterSeq", 0)
    limit = int_of(dict(request.GET.items()), "limit", 50)
    if after < 0 or not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"afterSeq must be >= 0 and limit 1-{MAX_PAGE}")
    page = Message.objects.filter(chat_id=chat_id, seq__gt=after).order_by("seq")[:limit]
    return {"messages": [out.message(m) for m in page]}


def post_message(user: UUID, request: R, chat_id: UUID) -> Any:
    data = body(request)
    file_meta = data.get("fileMeta")
    message = services.post_message(
        user,
        chat_id,
        text_of(data, "body", ""),
        kind=text_of(data, "kind", "Text"),
        file_meta=file_meta,
        card_text=text_of(data, "cardText", ""),
    )
    return 201, out.message(message)


def edit_message(user: UUID, request: R, chat_id: UUID, message_id: UUID) -> Any:
    message = services.edit_message(user, chat_id, message_id, text_of(body(request), "body"))
    return out.message(message)


def delete_message(user: UUID, request: R, chat_id: UUID, message_id: UUID) -> Any:
    services.delete_message(user, chat_id, message_id)
    return None


def mark_read(user: UUID, request: R, chat_id: UUID) -> Any:
    participant = services.mark_read(user, chat_id, int_of(body(request), "seq"))
    return out.participant(Participant.objects.select_related("user").get(id=participant.id))


def add_participant(user: UUID, request: R, chat_id: UUID) -> Any:
    services.add_participant(user, chat_id, uuid_of(body(request), "userId"))
    return 201, _chat_out(chat_id)


def remove_participant(user: UUID, request: R, chat_id: UUID, user_id: UUID) -> Any:
    services.remove_participant(user, chat_id, user_id)
    return None


def request_contact(user: UUID, request: R) -> Any:
    return 201, out.contact(services.request_contact(user, uuid_of(body(request), "userId")))


def accept_contact(user: UUID, request: R, contact_id: UUID) -> Any:
    return out.contact(services.accept_contact(user, contact_id))


def remove_contact(user: UUID, request: R, contact_id: UUID) -> Any:
    return out.contact(services.remove_contact(user, contact_id))


def block(user: UUID, request: R) -> Any:
    blocked = uuid_of(body(request), "userId")
    services.set_blocked(user, blocked, True)
    return 201, {"blockedUserId": str(blocked), "blocked": True}


def unblock(user: UUID, request: R, user_id: UUID) -> Any:
    services.set_blocked(user, user_id, False)
    return None


def start_call(user: UUID, request: R, chat_id: UUID) -> Any:
    return 201, out.call_with_media(services.start_call(user, chat_id), user)


def start_conference(user: UUID, request: R, chat_id: UUID) -> Any:
    return 201, out.call_with_media(services.start_conference(user, chat_id), user)


def call_action(user: UUID, request: R, call_id: UUID, action: str) -> Any:
    data = body(request)
    simple = {
        "answer": services.answer_call,
        "decline": services.decline_call,
        "cancel": services.cancel_call,
        "end": services.end_session,
    }
    if action in simple:
        call = simple[action](user, call_id)
        return out.call_with_media(call, user) if action == "answer" else out.call(call)
    if action == "join":
        participant = services.join(user, call_id)
        return out.call_with_media(participant.call, user)
    if action == "leave":
        return out.call_participant(services.leave(user, call_id))
    if action == "invite":
        return out.call(services.invite(user, call_id, uuid_of(data, "userId")))
    if action == "screen-share":
        active = data.get("active")
        if not isinstance(active, bool):
            raise BadRequest("active must be true or false")
        return out.call_participant(services.set_screen_share(user, call_id, active))
    if action == "recordings":
        return 201, out.recording(services.start_recording(user, call_id))
    raise BadRequest(f"unknown call action {action!r}")


def stop_recording(user: UUID, request: R, recording_id: UUID) -> Any:
    return out.recording(services.stop_recording(user, recording_id))


chats = endpoint(get=list_chats, post=create_chat)
chat = endpoint(get=get_chat, patch=rename_chat)
messages = endpoint(get=list_messages, post=post_message)
message = endpoint(patch=edit_message, delete=delete_message)
read = endpoint(post=mark_read)
participants = endpoint(post=add_participant)
participant = endpoint(delete=remove_participant)
contacts = endpoint(post=request_contact)
contact_accept = endpoint(post=accept_contact)
contact = endpoint(delete=remove_contact)
blacklist = endpoint(post=block)
blacklist_entry = endpoint(delete=unblock)
calls = endpoint(post=start_call)
conferences = endpoint(post=start_conference)
call = endpoint(post=call_action)
recording_stop = endpoint(post=stop_recording)
