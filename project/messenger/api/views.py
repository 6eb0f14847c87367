"""REST endpoints (JSON, camelCase). Each write is one owner use case: the domain change
and its outbox rows commit together. docs/api.md lists them all."""

import functools
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse

from messenger_realtime.outbox.streams import chat_stream, current_offsets, user_stream

from .. import services
from ..models import Chat, Message, Participant
from . import serializers
from .base import (
    BadRequest,
    body,
    check_content,
    content_limits,
    endpoint,
    int_of,
    text_of,
    uuid_of,
)

MAX_PAGE = 200


def _members(data: dict[str, Any]) -> list[UUID]:
    raw = data.get("memberIds")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("memberIds must be a non-empty list of user ids")
    return [uuid_of({"memberIds": item}, "memberIds") for item in raw]


def _chats_with_participants() -> QuerySet[Chat]:
    """Chats whose participants (and their names) come in one more query for all of them."""
    participants = Participant.objects.select_related("user")
    return Chat.objects.prefetch_related(Prefetch("participants", queryset=participants))


def _chat_out(chat_id: UUID) -> dict[str, Any]:
    # The stream's offset is read before the chat: never newer than what the payload
    # shows, so a client that recovers from it misses nothing (it may get an event twice).
    offset = current_offsets([chat_stream(chat_id)])[chat_stream(chat_id)]
    chat = _chats_with_participants().get(id=chat_id)
    return serializers.chat(chat, list(chat.participants.all()), offset)


def list_chats(user: UUID, request: HttpRequest) -> Any:
    """The caller's chats in a fixed number of queries, however many there are, with the
    offsets a client recovers from (chats' and its own user stream's, read first: see
    _chat_out)."""
    chat_ids = list(
        Participant.objects.filter(user_id=user, is_active=True).values_list("chat_id", flat=True)
    )
    offsets = current_offsets([user_stream(user), *(chat_stream(c) for c in chat_ids)])
    chats = _chats_with_participants().filter(id__in=chat_ids)
    return {
        "chats": [
            serializers.chat(c, list(c.participants.all()), offsets[chat_stream(c.id)])
            for c in chats
        ],
        "user": serializers.stream(user_stream(user), offsets[user_stream(user)]),
    }


def create_chat(user: UUID, request: HttpRequest) -> Any:
    data = body(request)
    chat = services.create_chat(user, _members(data), title=text_of(data, "title", ""))
    return 201, _chat_out(chat.id)


def get_chat(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    services.chats.active_participant(chat_id, user)
    return _chat_out(chat_id)


def rename_chat(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    services.rename_chat(user, chat_id, text_of(body(request), "title"))
    return _chat_out(chat_id)


def list_messages(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    services.chats.active_participant(chat_id, user)
    after = int_of(dict(request.GET.items()), "afterSeq", 0)
    limit = int_of(dict(request.GET.items()), "limit", 50)
    if after < 0 or not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"afterSeq must be >= 0 and limit 1-{MAX_PAGE}")
    page = Message.objects.filter(chat_id=chat_id, seq__gt=after).order_by("seq")[:limit]
    return {"messages": [serializers.message(m) for m in page]}


def post_message(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    data = body(request)
    file_meta = data.get("fileMeta")
    if file_meta is not None:  # the user's own structure: bounded, whatever its shape
        check_content(file_meta, "fileMeta", content_limits())
    client_id = data.get("clientMessageId")
    message, posted = services.messages.post_once(
        user,
        chat_id,
        text_of(data, "body", ""),
        kind=text_of(data, "kind", "Text"),
        file_meta=file_meta,
        card_text=text_of(data, "cardText", ""),
        client_message_id=None if client_id is None else uuid_of(data, "clientMessageId"),
    )
    # A retry of a send that already happened: the first message, as it is now.
    return (201 if posted else 200), serializers.message(message)


def edit_message(user: UUID, request: HttpRequest, chat_id: UUID, message_id: UUID) -> Any:
    message = services.edit_message(user, chat_id, message_id, text_of(body(request), "body"))
    return serializers.message(message)


def delete_message(user: UUID, request: HttpRequest, chat_id: UUID, message_id: UUID) -> Any:
    services.delete_message(user, chat_id, message_id)
    return None


def mark_read(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    participant = services.mark_read(user, chat_id, int_of(body(request), "seq"))
    return serializers.participant(
        Participant.objects.select_related("user").get(id=participant.id)
    )


def accept_chat(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    participant = services.accept_chat(user, chat_id)
    return serializers.participant(
        Participant.objects.select_related("user").get(id=participant.id)
    )


def add_participant(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    services.add_participant(user, chat_id, uuid_of(body(request), "userId"))
    return 201, _chat_out(chat_id)


def remove_participant(user: UUID, request: HttpRequest, chat_id: UUID, user_id: UUID) -> Any:
    services.remove_participant(user, chat_id, user_id)
    return None


def revoke_credentials(user: UUID, request: HttpRequest) -> Any:
    """Every token and session the caller holds is refused from now on (this one too),
    and their open hub connections close."""
    body(request)
    services.revocation.log_out_everywhere(user)
    return None


def request_contact(user: UUID, request: HttpRequest) -> Any:
    return 201, serializers.contact(
        services.request_contact(user, uuid_of(body(request), "userId"))
    )


def accept_contact(user: UUID, request: HttpRequest, contact_id: UUID) -> Any:
    return serializers.contact(services.accept_contact(user, contact_id))


def remove_contact(user: UUID, request: HttpRequest, contact_id: UUID) -> Any:
    return serializers.contact(services.remove_contact(user, contact_id))


def block(user: UUID, request: HttpRequest) -> Any:
    blocked = uuid_of(body(request), "userId")
    services.set_blocked(user, blocked, True)
    return 201, {"blockedUserId": str(blocked), "blocked": True}


def unblock(user: UUID, request: HttpRequest, user_id: UUID) -> Any:
    services.set_blocked(user, user_id, False)
    return None


def start_call(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    return 201, serializers.call_with_media(services.start_call(user, chat_id), user)


def start_conference(user: UUID, request: HttpRequest, chat_id: UUID) -> Any:
    return 201, serializers.call_with_media(services.start_conference(user, chat_id), user)


CallHandler = Callable[[UUID, dict[str, Any], UUID], Any]


def call_action(handler: CallHandler) -> Callable[..., HttpResponse]:
    """A POST view for one call action: handler(user, body, call_id). Every action reads
    the body, so a malformed one is refused alike whether or not the action uses it."""

    def with_body(user: UUID, request: HttpRequest, call_id: UUID) -> Any:
        return handler(user, body(request), call_id)

    return endpoint(post=functools.wraps(handler)(with_body))


def answer_call(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return serializers.call_with_media(services.answer_call(user, call_id), user)


def decline_call(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return serializers.call(services.decline_call(user, call_id))


def cancel_call(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return serializers.call(services.cancel_call(user, call_id))


def end_session(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return serializers.call(services.end_session(user, call_id))


def invite(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return serializers.call(services.invite(user, call_id, uuid_of(data, "userId")))


def join(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return serializers.call_with_media(services.join(user, call_id).call, user)


def leave(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return serializers.call_participant(services.leave(user, call_id))


def set_screen_share(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    active = data.get("active")
    if not isinstance(active, bool):
        raise BadRequest("active must be true or false")
    return serializers.call_participant(services.set_screen_share(user, call_id, active))


def start_recording(user: UUID, data: dict[str, Any], call_id: UUID) -> Any:
    return 201, serializers.recording(services.start_recording(user, call_id))


def unknown_call_action(user: UUID, request: HttpRequest, call_id: UUID, action: str) -> Any:
    body(request)  # a malformed body is refused first, as for the known actions
    raise BadRequest(f"unknown call action {action!r}")


def stop_recording(user: UUID, request: HttpRequest, recording_id: UUID) -> Any:
    return serializers.recording(services.stop_recording(user, recording_id))


chats = endpoint(get=list_chats, post=create_chat)
logout_everywhere = endpoint(post=revoke_credentials)
chat = endpoint(get=get_chat, patch=rename_chat)
messages = endpoint(get=list_messages, post=post_message)
message = endpoint(patch=edit_message, delete=delete_message)
read = endpoint(post=mark_read)
accept = endpoint(post=accept_chat)
participants = endpoint(post=add_participant)
participant = endpoint(delete=remove_participant)
contacts = endpoint(post=request_contact)
contact_accept = endpoint(post=accept_contact)
contact = endpoint(delete=remove_contact)
blacklist = endpoint(post=block)
blacklist_entry = endpoint(delete=unblock)
calls = endpoint(post=start_call)
conferences = endpoint(post=start_conference)
call_answer = call_action(answer_call)
call_decline = call_action(decline_call)
call_cancel = call_action(cancel_call)
call_end = call_action(end_session)
call_invite = call_action(invite)
call_join = call_action(join)
call_leave = call_action(leave)
call_screen_share = call_action(set_screen_share)
call_recordings = call_action(start_recording)
call_unknown = endpoint(post=unknown_call_action)
recording_stop = endpoint(post=stop_recording)
