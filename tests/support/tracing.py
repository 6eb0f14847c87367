"""An OpenTelemetry SDK provider for one test, and the process's no-SDK state back after.

The API lets a process set its global tracer provider only once, so a test that set one
leaked it into every later test (and a no-SDK test failed after it). Tests install and
remove theirs through OpenTelemetry's module globals instead: test-only, on purpose.
"""

from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def _reset() -> None:
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()


def sdk_spans() -> Iterator[InMemorySpanExporter]:
    """Install an SDK provider recording into memory; yield its exporter; remove it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _reset()
