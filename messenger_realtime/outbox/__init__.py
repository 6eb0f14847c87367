"""The owner-side API: write push intents inside the owner's own transaction.

    from messenger_realtime import outbox
    from messenger_realtime.outbox.enums import RealtimeDispatchKind

    with transaction.atomic():
        message = post_message(...)
        outbox.enqueue(RealtimeDispatchKind.MESSAGE_RECEIVED, chat_id=chat.id,
                       message_id=message.id, seq=message.seq)

Also here: the enums every part shares (enums.py), the model (models.py), the one NOTIFY
(notify.py), the state changes people make (operations.py) and the quarantine signal.
"""

from messenger_realtime.exceptions import TransactionRequired
from messenger_realtime.outbox.intents import OutboxIntent, enqueue, enqueue_many

__all__ = ["OutboxIntent", "TransactionRequired", "enqueue", "enqueue_many"]
