"""Fixtures for the tracer tests: one SDK provider for the session, an in-memory exporter per test.

OpenTelemetry lets a process set the global tracer provider once, and ``@observe`` resolves its
tracer through the global provider. So the session installs (or reuses) one SDK provider and adds
an in-memory exporter to it; each test gets that exporter cleared, and the capture policy reset.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge.tracer import _capture as capture


class Spans:
    """The spans finished during one test, with small lookup helpers."""

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
        self.exporter = exporter
        self.provider = provider

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> ReadableSpan:
        found = [s for s in self.all() if s.name == name]
        assert len(found) == 1, f"expected one span {name!r}, got {[s.name for s in self.all()]}"
        return found[0]

    def names(self) -> list[str]:
        return [s.name for s in self.all()]


@pytest.fixture(scope="session")
def _session_tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        provider = current
    else:
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        assert trace.get_tracer_provider() is provider
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def spans(_session_tracing: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[Spans]:
    provider, exporter = _session_tracing
    exporter.clear()
    capture.reset_policy()
    yield Spans(exporter, provider)
    capture.reset_policy()
    exporter.clear()
