"""From an outbox row to the event pushed to its hub group.

Rows carry reference ids only; the payload is built at delivery time. Until the typed
per-kind contracts land (they read the domain through the host's port), every kind is
pushed as its reference payload: the row's ids in camelCase, never a body.
"""

from dataclasses import dataclass
from typing import Any

from .enums import event_name
from .groups import target_group
from .store import ClaimedRow


class InvalidRow(ValueError):
    """A row that can never be delivered (bad Kind/target combination, missing entity).

    Retrying cannot help, so the dispatcher quarantines it at once with this reason.
    """


@dataclass(frozen=True)
class OutgoingEvent:
    group: str  # logical hub group: chat:{ChatId} or user:{UserId}
    name: str  # snake_case hub event name, e.g. message_received
    payload: dict[str, Any]


def reference_payload(row: ClaimedRow) -> dict[str, Any]:
    fields = {
        "kind": row.kind,
        "chatId": row.chat_id,
        "targetUserId": row.target_user_id,
        "messageId": row.message_id,
        "refId": row.ref_id,
        "sessionKind": row.session_kind,
        "seq": row.seq,
    }
    return {k: (str(v) if k.endswith("Id") else v) for k, v in fields.items() if v is not None}


def build_event(row: ClaimedRow) -> OutgoingEvent:
    try:
        group = target_group(row.target_kind, row.chat_id, row.target_user_id)
    except ValueError as exc:
        raise InvalidRow(f"InvalidTarget: {exc}") from exc
    return OutgoingEvent(group, event_name(row.kind), reference_payload(row))
