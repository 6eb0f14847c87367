"""Shared pieces of the typed contracts: the registry entry and the validation helpers."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from messenger_realtime.contracts.events import OutboxRow
from messenger_realtime.exceptions import InvalidRow
from messenger_realtime.outbox.enums import RealtimeTargetKind

Payload = dict[str, Any]


@dataclass(frozen=True)
class Contract:
    """How one Kind becomes a payload.

    reference: which row field holds the id of the entity the kind refers to (the
    DomainPort method that loads it is the kind's outbox.enums.READ_BY); build: (row,
    entity view) -> payload, after validating the row against the view (raising
    InvalidRow); per_recipient: the hub
    completes the payload for each receiving user (media credentials at delivery); joins:
    which chat the event's user has just joined, if any.
    """

    reference: str  # "message_id" or "ref_id"
    build: Callable[[OutboxRow, Any], Payload]
    per_recipient: bool = False
    # (row, entity view) -> the chat a user event makes its user join (OutgoingEvent.joins)
    joins: Callable[[OutboxRow, Any], UUID | None] | None = None


# Where a payload holds a time (always written with iso()): ISO 8601 text in JSON, the
# timestamp extension in MessagePack (hub/protocols/messagepack.py), which is what the
# official MessagePack clients read as a date. Declared by place, never found by key name:
# a TIME_FIELDS key at the payload's top level, or inside one of the contract-owned
# objects TIMED_OBJECTS. Nothing inside user content (`fileMeta`, ...) is a time, whatever
# its keys are called: it goes out exactly as it was stored (contracts/content.py).
TIME_FIELDS = frozenset(
    {
        "at",
        "sentAt",
        "editedAt",
        "deletedAt",
        "createdAt",
        "answeredAt",
        "endedAt",
        "joinedAt",
        "leftAt",
        "startedAt",
        "stoppedAt",
    }
)
TIMED_OBJECTS = frozenset({"participant", "recording"})  # contracts/media.py builds them


def iso(value: datetime | None) -> str | None:
    """A time field's value (its key belongs in TIME_FIELDS, at a declared place)."""
    return value.isoformat() if value is not None else None


def ids(**values: UUID | None) -> dict[str, str]:
    """camelCase id fields as strings, dropping the absent ones."""
    return {k: str(v) for k, v in values.items() if v is not None}


def compact(payload: Payload) -> Payload:
    """Drop optional fields that are absent (None), as the .NET hub's serializer did."""
    return {k: v for k, v in payload.items() if v is not None}


def require_chat_group(row: OutboxRow, chat_id: UUID) -> None:
    if row.target_kind != RealtimeTargetKind.CHAT_GROUP:
        raise InvalidRow(f"InvalidTarget: {row.kind} goes to its chat group, not a user")
    if row.chat_id != chat_id:
        raise InvalidRow(f"ReferenceMismatch: {row.kind} refers to another chat")


def require_user(row: OutboxRow, *allowed: UUID | None) -> UUID:
    if row.target_kind != RealtimeTargetKind.USER or row.target_user_id is None:
        raise InvalidRow(f"InvalidTarget: {row.kind} goes to a user group")
    if row.target_user_id not in allowed:
        raise InvalidRow(f"InvalidTarget: {row.kind} target is not a party to the entity")
    return row.target_user_id


def no_session_kind(row: OutboxRow) -> None:
    if row.session_kind is not None:
        raise InvalidRow(f"InvalidSessionKind: {row.kind} is not a media event")
