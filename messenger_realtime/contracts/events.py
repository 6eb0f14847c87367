"""What the dispatcher pushes: one event for one hub group, and why a row cannot be built."""

from dataclasses import dataclass
from typing import Any


class InvalidRow(ValueError):
    """A row that can never be delivered; str() is its `last_error` ("Code: detail").

    The rule: a row whose referenced entity does not exist, or whose Kind / target /
    SessionKind combination breaks its contract, is quarantined at once. Retrying cannot
    fix it (entities are never re-created under the same id, rows are immutable), and
    every retry would only delay the alert that someone must look at it.
    """


@dataclass(frozen=True)
class OutgoingEvent:
    group: str  # logical hub group: chat:{ChatId} or user:{UserId}
    name: str  # snake_case hub event name, e.g. message_received
    payload: dict[str, Any]
