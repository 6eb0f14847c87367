"""OpenTelemetry spans for the dispatcher: one per pass (jobRunId), a child per row.

Only when the process has an SDK tracer provider configured (for example by
opentelemetry-instrument or the host's settings); otherwise the spans are not even
created, so tracing costs nothing.
"""

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry import trace

from messenger_realtime.ops.logging import Field

_tracer = trace.get_tracer("messenger_realtime.dispatch.dispatcher")


def enabled() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@contextlib.contextmanager
def pass_span(job_run_id: str) -> Iterator[Any]:
    if not enabled():
        yield None
        return
    with _tracer.start_as_current_span(
        "realtime_dispatch.pass", attributes={"jobRunId": job_run_id}
    ) as span:
        yield span


@contextlib.contextmanager
def row_spans(rows: Sequence[Any]) -> Iterator[None]:
    """A child span per row around one push of those rows (one row, or a pipelined chunk)."""
    if not enabled():
        yield
        return
    with contextlib.ExitStack() as stack:
        for row in rows:
            stack.enter_context(_detached_row_span(row))
        yield


@contextlib.contextmanager
def _detached_row_span(row: Any) -> Iterator[Any]:
    attributes: dict[str, str | int] = {Field.KIND: row.kind, Field.ENTRY_ID: str(row.id)}
    attributes[Field.ATTEMPTS] = row.attempts
    if row.chat_id is not None:
        attributes[Field.CHAT_ID] = str(row.chat_id)
    span = _tracer.start_span("realtime_dispatch.row", attributes=attributes)
    try:
        yield span
    finally:
        span.end()
