"""Traces: a span per pass (jobRunId) with a child per row (Kind, ChatId), only when an
OpenTelemetry SDK is configured."""

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from messenger_realtime.ops import tracing
from tests.support.dispatch import one_pass
from tests.support.factories import OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, options
from tests.support.runtime import run

pytestmark = pytest.mark.usefixtures("transactional_db")


def test_without_an_sdk_no_span_is_made() -> None:
    if tracing.enabled():
        pytest.fail("an SDK provider is already configured in this process")
    row = OutboxEntryFactory()
    publisher = RecordingPublisher()
    result = run(one_pass(options(), publisher))
    # The pass ran its traced path (pass and row spans) without an SDK, and delivered.
    assert result.dispatched == 1
    assert [e.payload["messageId"] for e in publisher.events] == [str(row.message_id)]
    with tracing.pass_span("x") as span:
        assert span is None  # with tracing off the context managers yield None


def test_a_pass_span_holds_one_child_per_row() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process; later tests keep it
    rows = OutboxEntryFactory.create_batch(2)
    run(one_pass(options(), RecordingPublisher()))
    spans = exporter.get_finished_spans()
    (pass_span,) = [s for s in spans if s.name == "realtime_dispatch.pass"]
    children = [s for s in spans if s.name == "realtime_dispatch.row"]
    assert len(pass_span.attributes["jobRunId"]) == 32
    assert [c.parent.span_id for c in children] == [pass_span.context.span_id] * 2
    assert sorted(c.attributes["ChatId"] for c in children) == sorted(str(r.chat_id) for r in rows)
    assert {c.attributes["Kind"] for c in children} == {"MessageReceived"}
