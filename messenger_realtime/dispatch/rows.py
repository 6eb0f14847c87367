"""A claimed row and its fate: one RowOutcome carried from claim to report.

The claim makes a RowOutcome per row; building gives it its event (or decides it);
pushing decides the rest; recording writes the decision and notes what the database
kept; reporting reads only RowOutcomes. Nothing about a row travels beside it.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple
from uuid import UUID

from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.outbox.enums import RealtimeOutboxStatus


class ClaimedRow(NamedTuple):
    """One claimed row, built positionally from CLAIM's RETURNING list (same order):
    a tuple is the cheapest row object, and the claim returns thousands per second."""

    id: UUID
    kind: str
    target_kind: str
    chat_id: UUID | None
    target_user_id: UUID | None
    message_id: UUID | None
    ref_id: UUID | None
    session_kind: str | None
    seq: int | None
    status: str  # Pending, or Quarantined when the claim found its attempts exhausted
    attempts: int
    row_version: int
    created_at: datetime
    age: float  # seconds since created_at, by the database clock at claim
    stream_offset: int | None = None  # its place in its target's stream (outbox/streams.py)


class Fate(StrEnum):
    """What this attempt decided for a row."""

    DONE = "Done"  # pushed: mark Done
    RETRY = "Retry"  # transient failure: stays Pending (quarantined at MAX_ATTEMPTS)
    QUARANTINE = "Quarantine"  # permanent failure: never deliverable
    RELEASE = "Release"  # not pushed because the worker stops: attempt given back
    ISOLATE = "Isolate"  # its batch's build failed: retried alone, at once, as a suspect
    EXPIRE = "Expire"  # too old to matter (a delivery deadline): Done, not pushed


@dataclass(slots=True)
class RowOutcome:
    """A claimed row, what was built for it, what was decided and what was recorded."""

    row: ClaimedRow
    suspect: bool = False  # claimed as a suspect (alone): a failure keeps it one
    event: OutgoingEvent | None = None
    fate: Fate | None = None  # None until decided
    error: str | None = None  # becomes last_error: class and code only, never a body
    recorded: RealtimeOutboxStatus | None = None  # the status written; None if stale
    lag: float | None = None  # now - created_at when recorded Done (the SLO metric)

    def decide(self, fate: Fate, error: str | None = None) -> None:
        self.fate, self.error = fate, error

    @property
    def undecided(self) -> bool:
        return self.fate is None
