"""A row span's attributes: the spec's correlation ids where the row has them, no body."""

from datetime import UTC, datetime
from uuid import uuid4

from messenger_realtime.dispatch.rows import ClaimedRow
from messenger_realtime.ops.tracing import row_attributes


def claimed(**values: object) -> ClaimedRow:
    row = {
        "id": uuid4(),
        "kind": "CallInvited",
        "target_kind": "User",
        "chat_id": None,
        "target_user_id": uuid4(),
        "message_id": None,
        "ref_id": uuid4(),
        "session_kind": "Direct",
        "seq": None,
        "status": "Pending",
        "attempts": 2,
        "row_version": 3,
        "created_at": datetime(2026, 11, 30, 7, 0, 1, 250000, tzinfo=UTC),
        "age": 0.5,
    }
    row.update(values)
    return ClaimedRow(**row)  # type: ignore[arg-type]


def test_a_media_row_span_carries_ref_id_target_and_created_at_but_no_message_ids() -> None:
    row = claimed()
    assert row_attributes(row) == {
        "Kind": "CallInvited",
        "EntryId": str(row.id),
        "Attempts": 2,
        "CreatedAt": "2026-11-30T07:00:01.250000+00:00",
        "TargetUserId": str(row.target_user_id),
        "RefId": str(row.ref_id),
    }


def test_a_message_row_span_carries_chat_message_and_seq() -> None:
    row = claimed(
        kind="MessageReceived",
        target_kind="ChatGroup",
        chat_id=uuid4(),
        target_user_id=None,
        message_id=uuid4(),
        ref_id=None,
        session_kind=None,
        seq=41,
    )
    attributes = row_attributes(row)
    assert (attributes["ChatId"], attributes["MessageId"], attributes["Seq"]) == (
        str(row.chat_id),
        str(row.message_id),
        41,
    )
    assert "RefId" not in attributes and "TargetUserId" not in attributes
