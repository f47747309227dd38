"""OpenTelemetry pieces shared by the runners: a counting in-memory exporter, providers, a raw span.

Imported only by runners whose environment has ``opentelemetry-sdk`` (all of them: every peer
depends on it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

PROCESSORS = ("batch", "simple")


class CountingExporter(SpanExporter):
    """In-memory exporter that counts spans and keeps only the last one.

    Keeping every span (as ``InMemorySpanExporter`` does) would grow the heap by hundreds of
    thousands of spans over a run and make later rounds pay for garbage collection of earlier
    ones; counting keeps every round alike while still receiving every span.
    """

    def __init__(self) -> None:
        self.count = 0
        self.last: ReadableSpan | None = None
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.count += len(spans)
            if spans:
                self.last = spans[-1]
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def make_provider(processor: str, exporter: SpanExporter) -> TracerProvider:
    """An SDK provider with one processor (``batch``: SDK defaults; ``simple``) on ``exporter``."""
    provider = TracerProvider()
    if processor == "batch":
        provider.add_span_processor(BatchSpanProcessor(exporter))
    elif processor == "simple":
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        raise ValueError(f"unknown processor {processor!r}; expected one of {PROCESSORS}")
    return provider


def raw_span(tracer: Any, fn: Callable[[str], Any], name: str = "trivial") -> Callable[[str], Any]:
    """What a user writes by hand with the OTel API: one current span around the call."""

    def wrapper(question: str) -> Any:
        with tracer.start_as_current_span(name):
            return fn(question)

    return wrapper


def describe(processor: str) -> str:
    if processor == "batch":
        return "BatchSpanProcessor (SDK defaults) -> CountingExporter (in-memory, counts spans)"
    return "SimpleSpanProcessor -> CountingExporter (in-memory, counts spans)"


def take_last(*exporters: CountingExporter) -> dict[str, Any] | None:
    """Summary of the newest span any of ``exporters`` got since the last call; then forget it."""
    found = None
    for exporter in exporters:
        with exporter._lock:
            if found is None and exporter.last is not None:
                found = exporter.last
            exporter.last = None
    return span_summary(found)


def span_summary(span: ReadableSpan | None) -> dict[str, Any] | None:
    """Name and attribute keys of one exported span, to show what a tracer actually recorded."""
    if span is None:
        return None
    attributes = span.attributes or {}
    return {
        "name": span.name,
        "attributes": sorted(attributes.keys()),
        "attribute_chars": sum(len(str(v)) for v in attributes.values()),
    }
