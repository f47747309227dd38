"""Fixtures for the online loop: a traced app writing into a store on a controllable clock,
the offline rule-based judge on 127.0.0.1, and an OTLP sink for the evaluation spans."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from spanjudge._demo.judge import start_offline_judge
from spanjudge._store import open_store
from spanjudge._store.sql import SpanStore
from spanjudge.exporters._store_spans import StoreSpanExporter
from spanjudge.testing import ScriptedJudgeServer
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink
from tests.support.span_switch import SpanSwitch, install

_SWITCH = SpanSwitch()


@pytest.fixture(scope="session")
def _provider() -> TracerProvider:
    return install(_SWITCH)


@pytest.fixture
def clock() -> Clock:
    return Clock()


class App:
    """Spans of ``@observe`` calls go through the real store exporter into ``store``."""

    def __init__(self, store: SpanStore, clock: Clock) -> None:
        self.store = store
        self.exporter = StoreSpanExporter(store, flush_interval=0.01, clock=clock)
        self.processor = SimpleSpanProcessor(self.exporter)

    def flush(self) -> None:
        assert self.exporter.force_flush(10_000)
        assert self.exporter.dropped_total == 0


@pytest.fixture
def store(tmp_path: Any) -> Iterator[SpanStore]:
    s = open_store(f"sqlite:///{tmp_path}/spans.db")
    yield s
    s.close()


@pytest.fixture
def app(_provider: TracerProvider, store: SpanStore, clock: Clock) -> Iterator[App]:
    application = App(store, clock)
    _SWITCH.target = application.processor
    yield application
    _SWITCH.target = None
    application.exporter.shutdown()


@pytest.fixture
def offline_judge() -> Iterator[ScriptedJudgeServer]:
    server = start_offline_judge()
    yield server
    server.stop()


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as s:
        yield s
