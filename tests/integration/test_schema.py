"""messenger.realtime_outbox is exactly the spec's table, and PostgreSQL enforces it."""

import uuid

import pytest
from django.db import IntegrityError, connection, transaction

from messenger_realtime.models import RealtimeOutboxEntry
from messenger_realtime.outbox.enums import RealtimeDispatchKind, event_name
from messenger_realtime.uuid7 import uuid7

pytestmark = pytest.mark.django_db

EXPECTED_COLUMNS = {
    "id": ("uuid", None, "NO"),
    "kind": ("character varying", 32, "NO"),
    "target_kind": ("character varying", 16, "NO"),
    "chat_id": ("uuid", None, "YES"),
    "target_user_id": ("uuid", None, "YES"),
    "message_id": ("uuid", None, "YES"),
    "ref_id": ("uuid", None, "YES"),
    "session_kind": ("character varying", 12, "YES"),
    "seq": ("bigint", None, "YES"),
    "stream_offset": ("bigint", None, "YES"),  # recovery (outbox/streams.py), not the spec's
    "status": ("character varying", 16, "NO"),
    "attempts": ("integer", None, "NO"),
    "next_attempt_at": ("timestamp with time zone", None, "NO"),
    "last_error": ("character varying", 512, "YES"),
    "created_at": ("timestamp with time zone", None, "NO"),
    "updated_at": ("timestamp with time zone", None, "NO"),
    "row_version": ("bigint", None, "NO"),
    # Beyond the spec, for isolation (docs/dispatcher.md): the attempt in flight, and the
    # hub target fair claims take turns over (generated from target_kind and the ids).
    "claimed_at": ("timestamp with time zone", None, "YES"),
    "target_key": ("uuid", None, "YES"),
}


def raw_insert(**values: object) -> None:
    row = {"id": uuid7(), "kind": "MessageReceived", "target_kind": "ChatGroup"}
    row["chat_id"] = uuid.uuid4()
    row.update(values)
    cols = ", ".join(row)
    marks = ", ".join(["%s"] * len(row))
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO messenger.realtime_outbox ({cols}) VALUES ({marks})", list(row.values())
        )


def test_table_lives_in_messenger_schema_with_the_spec_columns() -> None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT column_name, data_type, character_maximum_length, is_nullable"
            " FROM information_schema.columns"
            " WHERE table_schema = 'messenger' AND table_name = 'realtime_outbox'"
        )
        columns = {name: (kind, length, null) for name, kind, length, null in cur.fetchall()}
    assert columns == EXPECTED_COLUMNS


def test_indexes_ix_rto_due_and_ix_rto_chat_exist_with_spec_columns() -> None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = 'messenger' AND tablename = 'realtime_outbox'"
        )
        indexes = dict(cur.fetchall())
    assert "(status, next_attempt_at)" in indexes["ix_rto_due"]
    assert "(chat_id)" in indexes["ix_rto_chat"]


def test_target_key_is_the_chat_of_a_chat_push_and_the_user_of_a_user_push() -> None:
    chat, user = uuid.uuid4(), uuid.uuid4()
    raw_insert(chat_id=chat)
    raw_insert(target_kind="User", chat_id=chat, target_user_id=user)
    with connection.cursor() as cur:
        cur.execute("SELECT target_kind, target_key FROM messenger.realtime_outbox ORDER BY id")
        assert cur.fetchall() == [("ChatGroup", chat), ("User", user)]


def test_raw_insert_gets_spec_defaults_from_the_database() -> None:
    raw_insert()
    entry = RealtimeOutboxEntry.objects.get()
    assert (entry.status, entry.attempts, entry.row_version) == ("Pending", 0, 0)
    # All three from the database's clock at the INSERT: due at once.
    assert entry.next_attempt_at == entry.created_at == entry.updated_at


@pytest.mark.parametrize(
    "values",
    [
        {"kind": "MessageSent"},
        {"kind": "message_received"},
        {"target_kind": "Group"},
        {"status": "Failed"},
        {"session_kind": "Video"},
        {"attempts": -1},
        {"target_kind": "ChatGroup", "chat_id": None},
        {"target_kind": "User", "target_user_id": None},
        {"last_error": "x" * 513},
    ],
    ids=lambda v: ",".join(f"{k}={str(x)[:12]}" for k, x in v.items()),
)
def test_database_rejects_values_outside_the_spec(values: dict[str, object]) -> None:
    from django.db import DataError

    with pytest.raises((IntegrityError, DataError)):
        raw_insert(**values)
    assert RealtimeOutboxEntry.objects.count() == 0


def test_every_spec_kind_is_accepted_by_the_database() -> None:
    for kind in RealtimeDispatchKind.values:
        raw_insert(kind=kind)
    assert RealtimeOutboxEntry.objects.count() == 26


def test_event_names_are_snake_case_of_the_kinds() -> None:
    assert event_name("MessageReceived") == "message_received"
    assert event_name("ConferenceParticipantJoined") == "conference_participant_joined"
    assert len({event_name(k) for k in RealtimeDispatchKind.values}) == 26


def test_uuid7_is_version_7_and_sorts_in_creation_order() -> None:
    ids = [uuid7() for _ in range(5000)]
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_the_outbox_is_vacuumed_far_more_often_than_the_default() -> None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'messenger.realtime_outbox'::regclass"
        )
        options = set(cur.fetchone()[0])
    assert {
        "autovacuum_vacuum_scale_factor=0.02",
        "autovacuum_vacuum_threshold=2000",
        "autovacuum_vacuum_cost_delay=0",
    } <= options
