"""OpenTelemetry for the outbox: the owner's enqueue, and the dispatcher's pass and rows.

Only when the process has an SDK tracer provider configured (for example by
opentelemetry-instrument or the host's settings); otherwise no span or event is even
created, so tracing costs nothing.

Correlation without storing anything in the outbox: enqueue() adds an event
`realtime_outbox.enqueued` to the owner's current span (the REST request's, say) with the
row's EntryId and reference ids; the dispatcher's row span carries the same EntryId plus
RefId, MessageId, Seq and CreatedAt. Searching spans by EntryId joins the two traces.
"""

import contextlib
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from opentelemetry import trace

from messenger_realtime.ops.logging import Field

TRACER_NAME = "messenger_realtime.dispatch.dispatcher"
ENQUEUED_EVENT = "realtime_outbox.enqueued"


def enabled() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@functools.lru_cache(maxsize=4)
def _tracer_of(provider: trace.TracerProvider) -> trace.Tracer:
    return provider.get_tracer(TRACER_NAME)


def _tracer() -> trace.Tracer:
    """The tracer of the provider configured now (a module-level tracer would keep the
    first provider it saw for ever)."""
    return _tracer_of(trace.get_tracer_provider())


@contextlib.contextmanager
def pass_span(job_run_id: str) -> Iterator[Any]:
    if not enabled():
        yield None
        return
    with _tracer().start_as_current_span(
        "realtime_dispatch.pass", attributes={Field.JOB_RUN_ID: job_run_id}
    ) as span:
        yield span


@contextlib.contextmanager
def row_spans(rows: Sequence[Any]) -> Iterator[None]:
    """A child span per row around one push of those rows (one row, or a pipelined chunk)."""
    if not enabled():
        yield
        return
    tracer = _tracer()
    with contextlib.ExitStack() as stack:
        for row in rows:
            stack.enter_context(_row_span(tracer, row))
        yield


def row_attributes(row: Any) -> dict[str, str | int]:
    """A claimed row's span attributes: ids, counts and its CreatedAt, never a body."""
    attributes: dict[str, str | int] = {
        Field.KIND: row.kind,
        Field.ENTRY_ID: str(row.id),
        Field.ATTEMPTS: row.attempts,
        Field.CREATED_AT: row.created_at.isoformat(),
    }
    return attributes | _reference_ids(row)


def note_enqueued(entries: Iterable[Any]) -> None:
    """Mark each new outbox row on the owner's current span (when it is recorded)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    for entry in entries:
        attributes: dict[str, str | int] = {
            Field.ENTRY_ID: str(entry.id),
            Field.KIND: str(entry.kind),
        }
        span.add_event(ENQUEUED_EVENT, attributes | _reference_ids(entry))


def _reference_ids(row: Any) -> dict[str, str | int]:
    ids: dict[str, str | int] = {}
    for field, value in (
        (Field.CHAT_ID, row.chat_id),
        (Field.TARGET_USER_ID, row.target_user_id),
        (Field.MESSAGE_ID, row.message_id),
        (Field.REF_ID, row.ref_id),
    ):
        if value is not None:
            ids[field] = str(value)
    if row.seq is not None:
        ids[Field.SEQ] = int(row.seq)
    return ids


@contextlib.contextmanager
def _row_span(tracer: trace.Tracer, row: Any) -> Iterator[Any]:
    span = tracer.start_span("realtime_dispatch.row", attributes=row_attributes(row))
    try:
        yield span
    finally:
        span.end()
