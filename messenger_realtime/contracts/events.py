"""What the dispatcher pushes: typed events for hub targets, and the row they come from.

A HubTarget is the spec's logical group (`chat:{ChatId}` or `user:{UserId}`); the
transport turns it into a Channels layer group in exactly one place
(backplane/group_names.py). An OutgoingEvent says whether the hub must complete its payload per
recipient (media credentials minted for each user at delivery, never queued).
"""

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol
from uuid import UUID

TargetKind = Literal["chat", "user"]


class HubTarget(NamedTuple):
    """A hub group: every connection of a chat's active members, or of one user."""

    kind: TargetKind
    id: UUID

    @classmethod
    def chat(cls, chat_id: UUID) -> "HubTarget":
        return cls("chat", chat_id)

    @classmethod
    def user(cls, user_id: UUID) -> "HubTarget":
        return cls("user", user_id)

    def __str__(self) -> str:
        """The spec's name: chat:{ChatId} or user:{UserId}."""
        return f"{self.kind}:{self.id}"


@dataclass(frozen=True, slots=True)
class OutgoingEvent:
    """One event for one hub target.

    per_recipient: the payload's `media` holds only a room name, and the hub replaces it
    with a MediaJoinModel minted for each receiving user (hub/media_credentials.py).
    membership_version: for a chat-group event, the chat's membership version when the
    batch was read; a connection that read its memberships at an older version re-reads
    them before delivering (hub/connection/membership.py). Never part of the payload.
    joins: for a user-group event, a chat the user has just joined: before this event is
    pushed, the user's connections join that chat's group, so every chat event pushed
    after it reaches them even when the owner's fast path failed.
    committed_at: when its row was committed (created_at, unix seconds by the database's
    clock), for a live push: the hub measures delivery from it to the client's
    acknowledgement (hub/connection/acknowledgements.py). Never part of the payload.
    """

    target: HubTarget
    name: str  # snake_case hub event name, e.g. message_received
    payload: dict[str, Any]
    per_recipient: bool = False
    membership_version: int | None = None
    joins: UUID | None = None
    committed_at: float | None = None


class OutboxRow(Protocol):
    """The reference ids of a claimed outbox row, as the contracts read them."""

    @property
    def kind(self) -> str: ...
    @property
    def target_kind(self) -> str: ...
    @property
    def chat_id(self) -> UUID | None: ...
    @property
    def target_user_id(self) -> UUID | None: ...
    @property
    def message_id(self) -> UUID | None: ...
    @property
    def ref_id(self) -> UUID | None: ...
    @property
    def session_kind(self) -> str | None: ...
    @property
    def seq(self) -> int | None: ...
    @property
    def stream_offset(self) -> int | None: ...
