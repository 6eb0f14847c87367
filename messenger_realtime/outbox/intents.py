"""The owner-side API: write push intents inside the owner's own transaction.

    with transaction.atomic():
        message = post_message(...)
        outbox.enqueue(RealtimeDispatchKind.MESSAGE_RECEIVED, chat_id=chat.id,
                       message_id=message.id, seq=message.seq)

On commit the rows exist and one `NOTIFY realtime_outbox` wakes the worker; on rollback
there is neither row nor notification (PostgreSQL delivers NOTIFY only at commit).
"""

import functools
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from uuid import UUID

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils.module_loading import import_string

from messenger_realtime.conf.settings import domain_port_path
from messenger_realtime.exceptions import TransactionRequired, UnsupportedKind
from messenger_realtime.ops import tracing
from messenger_realtime.outbox.enums import (
    READ_BY,
    RealtimeDispatchKind,
    RealtimeTargetKind,
    SessionKind,
)
from messenger_realtime.outbox.models import RealtimeOutboxEntry
from messenger_realtime.outbox.notify import notify
from messenger_realtime.outbox.streams import stream_name, take_offsets


@dataclass(frozen=True)
class OutboxIntent:
    """One push intent: reference ids only, never a body or other PII."""

    kind: str
    target_kind: str = RealtimeTargetKind.CHAT_GROUP
    chat_id: UUID | None = None
    target_user_id: UUID | None = None
    message_id: UUID | None = None
    ref_id: UUID | None = None
    session_kind: str | None = None
    seq: int | None = None

    def validate(self) -> None:
        """Raise ValueError with a reason instead of letting a CHECK constraint fire later."""
        if self.kind not in RealtimeDispatchKind.values:
            raise ValueError(f"unknown RealtimeDispatchKind {self.kind!r}")
        if self.target_kind not in RealtimeTargetKind.values:
            raise ValueError(f"unknown RealtimeTargetKind {self.target_kind!r}")
        if self.session_kind is not None and self.session_kind not in SessionKind.values:
            raise ValueError(f"unknown SessionKind {self.session_kind!r}")
        if self.target_kind == RealtimeTargetKind.CHAT_GROUP and self.chat_id is None:
            raise ValueError(f"{self.kind}: a ChatGroup push needs chat_id")
        if self.target_kind == RealtimeTargetKind.USER and self.target_user_id is None:
            raise ValueError(f"{self.kind}: a User push needs target_user_id")
        method = unbuildable_kinds().get(self.kind)
        if method is not None:
            raise UnsupportedKind(
                f"{self.kind} cannot be delivered: the DomainPort ({domain_port_path()}) does"
                f" not implement {method}(), which reads what {self.kind} refers to"
            )


@functools.cache
def unbuildable_kinds() -> Mapping[str, str]:
    """Each kind the host's DomainPort cannot build, with the optional read it lacks
    (the port answers: DomainPort.provides). Read once per process; the app forgets it
    when MESSENGER_REALTIME changes. A DOMAIN_PORT that cannot be imported refuses
    nothing here: system check E011 names it, and the worker does not start."""
    try:
        port_class = import_string(domain_port_path())
    except (ImportError, ImproperlyConfigured):
        return {}
    provides = getattr(port_class, "provides", None)
    if provides is None:  # not a DomainPort subclass: E011 requires every method of it
        return {}
    return {kind: method for kind, method in READ_BY.items() if not provides(method)}


def enqueue(
    kind: str,
    *,
    target_kind: str = RealtimeTargetKind.CHAT_GROUP,
    chat_id: UUID | None = None,
    target_user_id: UUID | None = None,
    message_id: UUID | None = None,
    ref_id: UUID | None = None,
    session_kind: str | None = None,
    seq: int | None = None,
    using: str = "default",
) -> RealtimeOutboxEntry:
    """Write one intent in the current transaction and wake the worker at commit.

    Args: the spec's reference ids (never a body): a ChatGroup push needs chat_id, a User
    push target_user_id; `using` is the owner's database alias.
    Returns: the new RealtimeOutboxEntry (Pending, due now by the database clock).
    Raises: TransactionRequired outside transaction.atomic(); ValueError naming the
    inconsistent field (unknown kind, missing target id); UnsupportedKind (a ValueError)
    for a kind the host's DomainPort does not read, naming the missing method.
    """
    intent = OutboxIntent(
        kind, target_kind, chat_id, target_user_id, message_id, ref_id, session_kind, seq
    )
    return enqueue_many([intent], using=using)[0]


def enqueue_many(
    intents: Iterable[OutboxIntent], *, using: str = "default"
) -> list[RealtimeOutboxEntry]:
    """Write several intents with one INSERT and one NOTIFY, in the current transaction.

    Each entry gets the next offset of its stream (outbox/streams.py): the stream's
    counter stays locked until the transaction ends, so enqueue late in it.
    Returns the new entries in order; raises as enqueue() does, before writing anything.
    """
    if not transaction.get_connection(using).in_atomic_block:
        raise TransactionRequired(
            "messenger_realtime.outbox.enqueue must run inside the owner's "
            "transaction.atomic(), so the intent commits (or rolls back) with the change"
        )
    intents = list(intents)
    for intent in intents:
        intent.validate()
    if not intents:
        return []
    streams = [stream_name(i.target_kind, i.chat_id, i.target_user_id) for i in intents]
    offsets = take_offsets(streams, using)  # locks each stream's counter to the commit
    entries = RealtimeOutboxEntry.objects.using(using).bulk_create(
        [
            RealtimeOutboxEntry(**asdict(intent), stream_offset=offset)
            for intent, offset in zip(intents, offsets, strict=True)
        ]
    )
    notify(using)  # delivered at commit, dropped on rollback
    tracing.note_enqueued(entries)  # the owner's span names the rows (correlation)
    return entries
