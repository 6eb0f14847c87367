"""The one NOTIFY that wakes the worker (its LISTEN is in dispatch/wakes.py).

Sent inside the writer's transaction: PostgreSQL delivers it at commit and drops it on
rollback, and folds identical notifications of one transaction into one, so repeated
writes in a transaction (even across savepoints) still wake the worker exactly once.
NOTIFY takes a global lock at commit: one tiny notification per transaction, no payload.
"""

from django.db import connections

NOTIFY_CHANNEL = "realtime_outbox"


def notify(using: str = "default") -> None:
    """Wake the worker when the current transaction on `using` commits."""
    with connections[using].cursor() as cursor:
        cursor.execute(f"NOTIFY {NOTIFY_CHANNEL}")
