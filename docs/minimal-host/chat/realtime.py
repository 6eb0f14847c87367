"""The host's DomainPort: what messenger_realtime reads of this domain (step 4).

Only the required reads: this host has no contacts, blacklists, calls or recordings, so
it leaves those optional reads out (and may not write their kinds)."""

from collections.abc import Mapping
from uuid import UUID

from chat.models import Chat, ChatEvent, Member, Message, User
from messenger_realtime.contracts.port import (
    ChatEventView,
    DomainPort,
    Ids,
    MessageView,
    ParticipantView,
)


class ChatPort(DomainPort):
    def active_chats(self, user_id: UUID) -> Mapping[UUID, int]:
        rows = Member.objects.filter(user_id=user_id, is_active=True)
        return dict(rows.values_list("chat_id", "chat__membership_version"))

    def membership_versions(self, chat_ids: Ids) -> Mapping[UUID, int]:
        return dict(Chat.objects.filter(id__in=chat_ids).values_list("id", "membership_version"))

    def user_exists(self, user_id: UUID) -> bool:
        return User.objects.filter(id=user_id, is_active=True).exists()

    def messages(self, ids: Ids) -> Mapping[UUID, MessageView]:
        return {
            m.id: MessageView(
                id=m.id,
                chat_id=m.chat_id,
                seq=m.seq,
                sender_user_id=m.sender_id,
                kind="Text",
                sent_at=m.sent_at,
                body=m.body,
                file_meta=None,
                card_text="",
                edited_at=None,
                deleted_at=None,
            )
            for m in Message.objects.filter(id__in=ids)
        }

    def participants(self, ids: Ids) -> Mapping[UUID, ParticipantView]:
        return {
            p.id: ParticipantView(p.id, p.chat_id, p.user_id, p.is_active, p.last_read_seq)
            for p in Member.objects.filter(id__in=ids)
        }

    def chat_events(self, ids: Ids) -> Mapping[UUID, ChatEventView]:
        return {
            e.id: ChatEventView(
                id=e.id,
                chat_id=e.chat_id,
                kind=e.kind,
                actor_user_id=e.actor_id,
                subject_user_id=e.subject_id,
                title=Chat.objects.get(id=e.chat_id).title,
                created_at=e.created_at,
            )
            for e in ChatEvent.objects.filter(id__in=ids)
        }
