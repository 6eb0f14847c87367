"""The host's implementation of the realtime app's DomainPort (one query per batch)."""

import json
from collections.abc import Mapping
from uuid import UUID

from django.db import connection

from messenger_realtime.contracts.port import (
    BlacklistView,
    CallParticipantView,
    CallView,
    ChatEventView,
    ContactView,
    DomainPort,
    Ids,
    MessageView,
    ParticipantView,
    RecordingView,
)

from .models import (
    BlacklistEntry,
    CallParticipant,
    CallSession,
    ChatEvent,
    Contact,
    Message,
    Participant,
    Recording,
    User,
)

MESSAGE_FIELDS = (
    "id",
    "chat_id",
    "seq",
    "sender_id",
    "kind",
    "sent_at",
    "body",
    "file_meta",
    "card_text",
    "edited_at",
    "deleted_at",
)  # MessageView's order


META = MESSAGE_FIELDS.index("file_meta")
MESSAGES_SQL = (
    f"SELECT {', '.join(MESSAGE_FIELDS)} FROM {Message._meta.db_table} WHERE id = ANY(%s::uuid[])"
)


def _call_view(c: CallSession) -> CallView:
    return CallView(
        c.id, c.session_kind, c.chat_id, c.room_name, c.status, c.initiator_id, c.callee_id,
        c.invited_user_id, c.ended_by_id, c.created_at, c.answered_at, c.ended_at,
    )  # fmt: skip


class HostDomainPort(DomainPort):
    def active_chat_ids(self, user_id: UUID) -> list[UUID]:
        rows = Participant.objects.filter(user_id=user_id, is_active=True)
        return list(rows.values_list("chat_id", flat=True))

    def user_exists(self, user_id: UUID) -> bool:
        return User.objects.filter(id=user_id, is_active=True).exists()

    def messages(self, ids: Ids) -> Mapping[UUID, MessageView]:
        # The hot path (every message event): one fixed statement with one array parameter,
        # plain tuples; the ORM would compile a new IN (...) of up to BATCH_SIZE
        # placeholders for every batch.
        with connection.cursor() as cursor:
            cursor.execute(MESSAGES_SQL, [list(ids)])
            rows = cursor.fetchall()
        views = {}
        for row in rows:
            values = list(row)
            if isinstance(values[META], str):  # Django reads jsonb as text (see JSONField)
                values[META] = json.loads(values[META])
            views[row[0]] = MessageView(*values)
        return views

    def participants(self, ids: Ids) -> Mapping[UUID, ParticipantView]:
        return {
            p.id: ParticipantView(p.id, p.chat_id, p.user_id, p.is_active, p.last_read_seq)
            for p in Participant.objects.filter(id__in=ids)
        }

    def chat_events(self, ids: Ids) -> Mapping[UUID, ChatEventView]:
        return {
            e.id: ChatEventView(
                e.id, e.chat_id, e.kind, e.actor_id, e.subject_user_id, e.title, e.created_at
            )
            for e in ChatEvent.objects.filter(id__in=ids)
        }

    def contacts(self, ids: Ids) -> Mapping[UUID, ContactView]:
        return {
            c.id: ContactView(c.id, c.requester_id, c.addressee_id, c.status, c.updated_at)
            for c in Contact.objects.filter(id__in=ids)
        }

    def blacklist_entries(self, ids: Ids) -> Mapping[UUID, BlacklistView]:
        return {
            b.id: BlacklistView(b.id, b.owner_id, b.blocked_user_id, b.is_active, b.updated_at)
            for b in BlacklistEntry.objects.filter(id__in=ids)
        }

    def calls(self, ids: Ids) -> Mapping[UUID, CallView]:
        return {c.id: _call_view(c) for c in CallSession.objects.filter(id__in=ids)}

    def call_participants(self, ids: Ids) -> Mapping[UUID, CallParticipantView]:
        rows = CallParticipant.objects.filter(id__in=ids).select_related("call")
        return {
            p.id: CallParticipantView(
                p.id, _call_view(p.call), p.user_id, p.joined_at, p.left_at, p.screen_sharing
            )
            for p in rows
        }

    def recordings(self, ids: Ids) -> Mapping[UUID, RecordingView]:
        rows = Recording.objects.filter(id__in=ids).select_related("call")
        return {
            r.id: RecordingView(
                r.id,
                _call_view(r.call),
                r.status,
                r.started_by_id,
                r.file_url,
                r.failure_code,
                r.started_at,
                r.stopped_at,
            )
            for r in rows
        }
