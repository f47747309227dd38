"""Tracing fixtures for the security tests.

``@observe`` records through the global tracer provider, which a process sets once; the tracer
and loop test folders each hang their own processor on it. This folder adds one more, a switch
that forwards finished spans only while one of its tests is running, so spans are never
delivered twice and nothing keeps collecting after these tests end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge._store.sql import SpanStore
from spanjudge.tracer import _capture as capture
from tests.evaluators.loop.conftest import (  # noqa: F401 (fixtures)
    App,
    Clock,
    clock,
    offline_judge,
    store,
)
from tests.support.span_switch import SpanSwitch, install
from tests.tracer.conftest import Spans


@pytest.fixture(scope="session")
def security_tracing() -> tuple[TracerProvider, SpanSwitch]:
    switch = SpanSwitch()
    return install(switch), switch


@pytest.fixture
def spans(security_tracing: tuple[TracerProvider, SpanSwitch]) -> Iterator[Spans]:
    """The spans finished during the test, in memory; the capture policy reset around it."""
    provider, switch = security_tracing
    exporter = InMemorySpanExporter()
    switch.target = SimpleSpanProcessor(exporter)
    capture.reset_policy()
    yield Spans(exporter, provider)
    switch.target = None
    capture.reset_policy()


@pytest.fixture
def traced_app(
    security_tracing: tuple[TracerProvider, SpanSwitch],
    store: SpanStore,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> Iterator[App]:
    """``@observe`` spans go through the real store exporter into ``store``."""
    _, switch = security_tracing
    application = App(store, clock)
    switch.target = application.processor
    yield application
    switch.target = None
    application.exporter.shutdown()
