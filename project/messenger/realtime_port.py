"""The host's implementation of the realtime app's DomainPort (one query per batch)."""

import json
from collections.abc import Collection, Mapping
from typing import Any
from uuid import UUID

from django.db import connection

from messenger_realtime.contracts import content
from messenger_realtime.contracts.port import (
    BlacklistView,
    CallParticipantView,
    CallView,
    ChatEventView,
    ChatRoster,
    ContactView,
    DomainPort,
    Ids,
    MessageView,
    ParticipantView,
    RecordingView,
    UserStanding,
)

from .models import (
    BlacklistEntry,
    CallParticipant,
    CallSession,
    Chat,
    ChatEvent,
    Contact,
    Message,
    Participant,
    Recording,
    User,
)

# MessageView field -> messenger_message column. The SELECT names each column after its
# field, and rows become views by those names (cursor.description), never by position.
MESSAGE_VIEW_COLUMNS = {
    "id": "id",
    "chat_id": "chat_id",
    "seq": "seq",
    "sender_user_id": "sender_id",
    "kind": "kind",
    "sent_at": "sent_at",
    "body": "body",
    "file_meta": "file_meta",
    "card_text": "card_text",
    "edited_at": "edited_at",
    "deleted_at": "deleted_at",
}
MEMBERSHIP_VERSIONS_SQL = (
    f"SELECT id, membership_version FROM {Chat._meta.db_table} WHERE id = ANY(%s::uuid[])"
)
# A chat's membership version and active members (uq_participant_chat_user, on (chat,
# user), serves the members; a chat without any gives an empty array).
CHAT_ROSTER_SQL = (
    f"SELECT c.membership_version, coalesce(array_agg(p.user_id) FILTER (WHERE p.user_id"
    f" IS NOT NULL), '{{}}') FROM {Chat._meta.db_table} c LEFT JOIN"
    f" {Participant._meta.db_table} p ON p.chat_id = c.id AND p.is_active"
    " WHERE c.id = %s GROUP BY c.membership_version"
)
# Every hub connect reads these two (fixed statements: the ORM compiled each query anew,
# most of a connect's database cost). A user's active memberships with their chats'
# versions, one snapshot (ix_participant_user, on (user, is_active), finds them); the
# user's standing by primary key.
ACTIVE_CHATS_SQL = (
    f"SELECT p.chat_id, c.membership_version FROM {Participant._meta.db_table} p"
    f" JOIN {Chat._meta.db_table} c ON c.id = p.chat_id"
    " WHERE p.user_id = %s AND p.is_active"
)
USER_STANDING_SQL = (
    f"SELECT is_active, credentials_revoked_at FROM {User._meta.db_table} WHERE id = %s"
)
# A connection opening: the user's standing and chats in one round trip. The user's row
# joined to their active memberships: one row per chat, or one with NULLs for a user in
# none; no row for an unknown user.
STANDING_AND_CHATS_SQL = (
    "SELECT u.is_active, u.credentials_revoked_at, p.chat_id, c.membership_version"
    f" FROM {User._meta.db_table} u"
    f" LEFT JOIN {Participant._meta.db_table} p ON p.user_id = u.id AND p.is_active"
    f" LEFT JOIN {Chat._meta.db_table} c ON c.id = p.chat_id"
    " WHERE u.id = %s"
)
# Presence: which of the asked users the viewer may see (a shared active chat or an
# accepted contact, and no active block either way; the viewer sees themselves). One
# statement for a whole watch list (ix_participant_user finds the viewer's chats).
# Presence by consent: a viewer sees a user who is themselves, an accepted contact, or a
# member of an active chat they share in which that user took part (created it or sent a
# message: Participant.took_part); a chat anyone opened with a stranger grants nothing
# until the stranger answers. Never when either blocked the other.
VISIBLE_USERS_SQL = (
    "SELECT u FROM unnest(%(users)s::uuid[]) AS u WHERE (u = %(viewer)s"
    f" OR EXISTS (SELECT 1 FROM {Participant._meta.db_table} a"
    f" JOIN {Participant._meta.db_table} b ON b.chat_id = a.chat_id"
    " WHERE a.user_id = %(viewer)s AND a.is_active"
    " AND b.user_id = u AND b.is_active AND b.took_part)"
    f" OR EXISTS (SELECT 1 FROM {Contact._meta.db_table} c WHERE c.status = 'Accepted'"
    " AND ((c.requester_id = %(viewer)s AND c.addressee_id = u)"
    " OR (c.addressee_id = %(viewer)s AND c.requester_id = u))))"
    f" AND NOT EXISTS (SELECT 1 FROM {BlacklistEntry._meta.db_table} x WHERE x.is_active"
    " AND ((x.owner_id = %(viewer)s AND x.blocked_user_id = u)"
    " OR (x.owner_id = u AND x.blocked_user_id = %(viewer)s)))"
)
# The other way round (DomainPort.viewers_of): which of the viewers may see one user; the
# same rule, the consent being the watched user's.
VIEWERS_OF_SQL = (
    "SELECT v FROM unnest(%(viewers)s::uuid[]) AS v WHERE (v = %(user)s"
    f" OR EXISTS (SELECT 1 FROM {Participant._meta.db_table} a"
    f" JOIN {Participant._meta.db_table} b ON b.chat_id = a.chat_id"
    " WHERE a.user_id = v AND a.is_active"
    " AND b.user_id = %(user)s AND b.is_active AND b.took_part)"
    f" OR EXISTS (SELECT 1 FROM {Contact._meta.db_table} c WHERE c.status = 'Accepted'"
    " AND ((c.requester_id = v AND c.addressee_id = %(user)s)"
    " OR (c.addressee_id = v AND c.requester_id = %(user)s))))"
    f" AND NOT EXISTS (SELECT 1 FROM {BlacklistEntry._meta.db_table} x WHERE x.is_active"
    " AND ((x.owner_id = v AND x.blocked_user_id = %(user)s)"
    " OR (x.owner_id = %(user)s AND x.blocked_user_id = v)))"
)
USERS_BLOCKING_SQL = (
    f"SELECT owner_id FROM {BlacklistEntry._meta.db_table} WHERE blocked_user_id = %s AND is_active"
)
LAST_SEEN_SQL = (
    f"SELECT id, extract(epoch FROM last_seen_at) FROM {User._meta.db_table}"
    " WHERE id = ANY(%s::uuid[]) AND last_seen_at IS NOT NULL"
)
# A batch of last-seen times in one statement; an older time never overwrites a newer.
RECORD_LAST_SEEN_SQL = (
    f"UPDATE {User._meta.db_table} AS u SET last_seen_at = greatest(u.last_seen_at,"
    " to_timestamp(s.seen)) FROM unnest(%s::uuid[], %s::float8[]) AS s(id, seen)"
    " WHERE u.id = s.id"
)
MESSAGES_SQL = "SELECT {} FROM {} WHERE id = ANY(%s::uuid[])".format(
    ", ".join(f"{column} AS {field}" for field, column in MESSAGE_VIEW_COLUMNS.items()),
    Message._meta.db_table,
)


def _call_view(c: CallSession) -> CallView:
    return CallView(
        id=c.id,
        session_kind=c.session_kind,
        chat_id=c.chat_id,
        room_name=c.room_name,
        status=c.status,
        initiator_user_id=c.initiator_id,
        callee_user_id=c.callee_id,
        invited_user_id=c.invited_user_id,
        ended_by_user_id=c.ended_by_id,
        created_at=c.created_at,
        answered_at=c.answered_at,
        ended_at=c.ended_at,
    )


def _json(text: str) -> Any:
    """A jsonb column's value; one nested past Python's limit (stored before the API
    bounded nesting) fails its own row at build, not the read of the whole batch."""
    try:
        return json.loads(text)
    except RecursionError:
        return content.Unreadable("nested too deeply")


class HostDomainPort(DomainPort):
    def active_chat_ids(self, user_id: UUID) -> list[UUID]:
        rows = Participant.objects.filter(user_id=user_id, is_active=True)
        return list(rows.values_list("chat_id", flat=True))

    def active_chats(self, user_id: UUID) -> Mapping[UUID, int]:
        # One statement: the memberships and their chats' versions from one snapshot.
        with connection.cursor() as cursor:
            cursor.execute(ACTIVE_CHATS_SQL, [user_id])
            return dict(cursor.fetchall())

    def membership_versions(self, chat_ids: Ids) -> Mapping[UUID, int]:
        # Read for every batch with a chat event: one fixed statement, as messages().
        with connection.cursor() as cursor:
            cursor.execute(MEMBERSHIP_VERSIONS_SQL, [list(chat_ids)])
            return dict(cursor.fetchall())

    def user_exists(self, user_id: UUID) -> bool:
        return User.objects.filter(id=user_id, is_active=True).exists()

    def chat_roster(self, chat_id: UUID) -> ChatRoster | None:
        # One statement, one snapshot: the version and the members it counts.
        with connection.cursor() as cursor:
            cursor.execute(CHAT_ROSTER_SQL, [chat_id])
            row = cursor.fetchone()
        if row is None:
            return None
        version, members = row
        return ChatRoster(int(version), frozenset(members))

    def user_standing(self, user_id: UUID) -> UserStanding:
        # One statement, whatever the answer: every negotiate, connect and REST call reads it.
        with connection.cursor() as cursor:
            cursor.execute(USER_STANDING_SQL, [user_id])
            found = cursor.fetchone()
        if found is None:
            return UserStanding(False)
        active, revoked = found
        return UserStanding(bool(active), revoked.timestamp() if revoked is not None else None)

    def standing_and_chats(self, user_id: UUID) -> tuple[UserStanding, Mapping[UUID, int]]:
        # Every hub connect reads both: one statement instead of two round trips.
        with connection.cursor() as cursor:
            cursor.execute(STANDING_AND_CHATS_SQL, [user_id])
            rows = cursor.fetchall()
        if not rows:
            return UserStanding(False), {}
        active, revoked = rows[0][:2]
        standing = UserStanding(bool(active), revoked.timestamp() if revoked is not None else None)
        return standing, {chat: version for _, _, chat, version in rows if chat is not None}

    def messages(self, ids: Ids) -> Mapping[UUID, MessageView]:
        # The hot path (every message event): one fixed statement with one array parameter,
        # plain tuples; the ORM would compile a new IN (...) of up to BATCH_SIZE
        # placeholders for every batch.
        with connection.cursor() as cursor:
            cursor.execute(MESSAGES_SQL, [list(ids)])
            names = [column.name for column in cursor.description]
            rows = cursor.fetchall()
        views = {}
        for row in rows:
            values = dict(zip(names, row, strict=True))
            if isinstance(values["file_meta"], str):  # Django reads jsonb as text (JSONField)
                values["file_meta"] = _json(values["file_meta"])
            views[values["id"]] = MessageView(**values)
        return views

    def participants(self, ids: Ids) -> Mapping[UUID, ParticipantView]:
        return {
            p.id: ParticipantView(
                id=p.id,
                chat_id=p.chat_id,
                user_id=p.user_id,
                is_active=p.is_active,
                last_read_seq=p.last_read_seq,
            )
            for p in Participant.objects.filter(id__in=ids)
        }

    def chat_events(self, ids: Ids) -> Mapping[UUID, ChatEventView]:
        return {
            e.id: ChatEventView(
                id=e.id,
                chat_id=e.chat_id,
                kind=e.kind,
                actor_user_id=e.actor_id,
                subject_user_id=e.subject_user_id,
                title=e.title,
                created_at=e.created_at,
            )
            for e in ChatEvent.objects.filter(id__in=ids)
        }

    def contacts(self, ids: Ids) -> Mapping[UUID, ContactView]:
        return {
            c.id: ContactView(
                id=c.id,
                requester_user_id=c.requester_id,
                addressee_user_id=c.addressee_id,
                status=c.status,
                updated_at=c.updated_at,
            )
            for c in Contact.objects.filter(id__in=ids)
        }

    def blacklist_entries(self, ids: Ids) -> Mapping[UUID, BlacklistView]:
        return {
            b.id: BlacklistView(
                id=b.id,
                owner_user_id=b.owner_id,
                blocked_user_id=b.blocked_user_id,
                is_active=b.is_active,
                updated_at=b.updated_at,
            )
            for b in BlacklistEntry.objects.filter(id__in=ids)
        }

    def calls(self, ids: Ids) -> Mapping[UUID, CallView]:
        return {c.id: _call_view(c) for c in CallSession.objects.filter(id__in=ids)}

    def call_participants(self, ids: Ids) -> Mapping[UUID, CallParticipantView]:
        rows = CallParticipant.objects.filter(id__in=ids).select_related("call")
        return {
            p.id: CallParticipantView(
                id=p.id,
                call=_call_view(p.call),
                user_id=p.user_id,
                joined_at=p.joined_at,
                left_at=p.left_at,
                screen_sharing=p.screen_sharing,
            )
            for p in rows
        }

    def recordings(self, ids: Ids) -> Mapping[UUID, RecordingView]:
        rows = Recording.objects.filter(id__in=ids).select_related("call")
        return {
            r.id: RecordingView(
                id=r.id,
                call=_call_view(r.call),
                status=r.status,
                started_by_user_id=r.started_by_id,
                file_url=r.file_url,
                failure_code=r.failure_code,
                started_at=r.started_at,
                stopped_at=r.stopped_at,
            )
            for r in rows
        }

    def visible_users(self, viewer_id: UUID, user_ids: Ids) -> Collection[UUID]:
        with connection.cursor() as cursor:
            cursor.execute(VISIBLE_USERS_SQL, {"viewer": viewer_id, "users": list(user_ids)})
            return {row[0] for row in cursor.fetchall()}

    def viewers_of(self, user_id: UUID, viewer_ids: Ids) -> Collection[UUID]:
        # Not visible_users the other way round: the consent is the watched user's.
        with connection.cursor() as cursor:
            cursor.execute(VIEWERS_OF_SQL, {"user": user_id, "viewers": list(viewer_ids)})
            return {row[0] for row in cursor.fetchall()}

    def users_blocking(self, user_id: UUID) -> Collection[UUID]:
        with connection.cursor() as cursor:
            cursor.execute(USERS_BLOCKING_SQL, [user_id])
            return {row[0] for row in cursor.fetchall()}

    def last_seen(self, user_ids: Ids) -> Mapping[UUID, float]:
        with connection.cursor() as cursor:
            cursor.execute(LAST_SEEN_SQL, [list(user_ids)])
            return {user: float(seen) for user, seen in cursor.fetchall()}

    def record_last_seen(self, seen: Mapping[UUID, float]) -> None:
        with connection.cursor() as cursor:
            cursor.execute(RECORD_LAST_SEEN_SQL, [list(seen), list(seen.values())])
