"""Outbox rows for partition tests, inserted in bulk (the claim reads no domain), and
the partition a target belongs to, asked of the database."""

import uuid

from django.db import connection

from messenger_realtime.dispatch import sql


def partition_of(key: uuid.UUID, count: int) -> int:
    with connection.cursor() as cur:
        cur.execute(sql.PARTITION_OF, {"key": key, "count": count})
        (index,) = cur.fetchone()
    return int(index)


def insert_rows(chats: list[uuid.UUID], per_chat: int, kind: str = "MessageReceived") -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id)"
            " SELECT gen_random_uuid(), %s, 'ChatGroup', c"
            " FROM unnest(%s::uuid[]) AS c, generate_series(1, %s)",
            [kind, chats, per_chat],
        )


def insert_invitations(users: list[uuid.UUID], *, suspect: bool = False) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO messenger.realtime_outbox"
            " (id, kind, target_kind, target_user_id, ref_id, claimed_at)"
            " SELECT gen_random_uuid(), 'CallInvited', 'User', u, gen_random_uuid(),"
            " CASE WHEN %s THEN now() END FROM unnest(%s::uuid[]) AS u",
            [suspect, users],
        )
