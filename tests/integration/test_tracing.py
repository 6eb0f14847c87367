"""Traces: a span per pass (jobRunId) with a child per row (Kind, ChatId, EntryId, RefId,
MessageId, Seq, CreatedAt), the owner's span naming the rows it enqueued, and nothing at
all without an SDK. Each test sets up its own tracing state, so the order does not matter."""

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from messenger_realtime.ops import tracing
from tests.support.dispatch import one_pass
from tests.support.factories import MessageFactory, OutboxEntryFactory
from tests.support.helpers import RecordingPublisher, commit_message_received, options
from tests.support.runtime import run
from tests.support.tracing import sdk_spans

pytestmark = pytest.mark.usefixtures("transactional_db")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from sdk_spans()


def test_without_an_sdk_no_span_is_made() -> None:
    assert not tracing.enabled()
    row = OutboxEntryFactory()
    publisher = RecordingPublisher()
    result = run(one_pass(options(), publisher))
    # The pass ran its traced path (pass and row spans) without an SDK, and delivered.
    assert result.dispatched == 1
    assert [e.payload["messageId"] for e in publisher.events] == [str(row.message_id)]
    with tracing.pass_span("x") as span:
        assert span is None  # with tracing off the context managers yield None


def test_a_pass_span_holds_one_child_per_row_with_its_reference_ids(
    spans: InMemorySpanExporter,
) -> None:
    rows = OutboxEntryFactory.create_batch(2)
    run(one_pass(options(), RecordingPublisher()))
    finished = spans.get_finished_spans()
    (pass_span,) = [s for s in finished if s.name == "realtime_dispatch.pass"]
    children = [s for s in finished if s.name == "realtime_dispatch.row"]
    assert len(pass_span.attributes["jobRunId"]) == 32
    assert [c.parent.span_id for c in children] == [pass_span.context.span_id] * 2
    by_entry = {c.attributes["EntryId"]: c.attributes for c in children}
    assert set(by_entry) == {str(r.id) for r in rows}
    for row in rows:
        attributes = by_entry[str(row.id)]
        assert attributes["Kind"] == "MessageReceived"
        assert attributes["ChatId"] == str(row.chat_id)
        assert attributes["MessageId"] == str(row.message_id)
        assert attributes["Seq"] == row.seq
        assert attributes["CreatedAt"] == row.created_at.isoformat()
        assert attributes["Attempts"] == 1
        assert "RefId" not in attributes  # only where the row has one


def test_the_owners_span_names_the_row_and_the_row_span_carries_the_same_entry_id(
    spans: InMemorySpanExporter,
) -> None:
    message = MessageFactory()
    owner = trace.get_tracer("tests").start_span("POST /api/chats/{id}/messages")
    with trace.use_span(owner, end_on_exit=True):
        entry = commit_message_received(message)
    run(one_pass(options(), RecordingPublisher()))
    finished = spans.get_finished_spans()
    (owner_span,) = [s for s in finished if s.name.startswith("POST")]
    (event,) = [e for e in owner_span.events if e.name == tracing.ENQUEUED_EVENT]
    assert dict(event.attributes or {}) == {
        "EntryId": str(entry.id),
        "Kind": "MessageReceived",
        "ChatId": str(message.chat_id),
        "MessageId": str(message.id),
        "Seq": message.seq,
    }
    (row_span,) = [s for s in finished if s.name == "realtime_dispatch.row"]
    assert row_span.attributes["EntryId"] == str(entry.id)
    assert row_span.context.trace_id != owner_span.context.trace_id  # joined by EntryId


def test_enqueue_outside_any_span_adds_nothing(spans: InMemorySpanExporter) -> None:
    commit_message_received(MessageFactory())
    assert spans.get_finished_spans() == ()
