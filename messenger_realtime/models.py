"""Django's models module for this app: the outbox model lives in outbox/models.py."""

from messenger_realtime.outbox.models import RealtimeOutboxEntry

__all__ = ["RealtimeOutboxEntry"]
