"""Internal signals of the dispatcher (no Kafka: alerts and metrics only)."""

from dataclasses import dataclass
from uuid import UUID

from django.dispatch import Signal


@dataclass(frozen=True)
class RealtimeDispatchQuarantinedEvent:
    OutboxEntryId: UUID
    Kind: str
    ChatId: UUID | None
    Attempts: int


# Sent with event=RealtimeDispatchQuarantinedEvent after the quarantine has committed.
realtime_dispatch_quarantined = Signal()
