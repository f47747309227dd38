"""Judge-result cache fixtures: stores on SQLite and PostgreSQL, a scripted judge for BiasMetric
(opinions, verdicts, reason), an OTLP sink for the evaluation spans and events, and a loop
builder that writes hand-built spans into the store and runs the real Monitor over them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge._core.telemetry import Telemetry
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.online.spans import Trace
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink
from tests.support.stores import BACKENDS, StoreFactory, schema_name, stores_on


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens stores on ONE database (a restart is: close, open another)."""
    with stores_on(request.param, tmp_path / "spans.db", schema_name("spanjudge_cache")) as make:
        yield make


def script_bias(server: ScriptedJudgeServer) -> None:
    """BiasMetric's three steps: one opinion, judged unbiased, and a reason."""
    server.add_rule({"opinions": ["Returns are easy."]}, schema="Opinions")
    server.add_rule({"verdicts": [{"verdict": "no", "reason": "neutral"}]}, schema="BiasVerdicts")
    server.add_rule({"reason": "No bias: the one opinion is neutral."}, schema="Reason")


@pytest.fixture
def judge_server() -> Iterator[ScriptedJudgeServer]:
    with ScriptedJudgeServer() as server:
        script_bias(server)
        yield server


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as s:
        yield s


def write_traces(store: SpanStore, clock: Clock, answers: list[str]) -> list[Trace]:
    """One settled trace per answer (an agent turn around an LLM call) in ``store``."""
    traces = []
    for answer in answers:
        trace = Trace(service="shop")
        turn = trace.agent(user="Can I return my shoes?", answer=answer)
        trace.llm(user="Can I return my shoes?", answer=answer, parent=turn)
        store.write_spans(trace.spans, now=clock())
        traces.append(trace)
    clock.advance(60)  # settled
    return traces


@dataclass
class Loop:
    """Builds a Monitor on a store with an emitter to the sink; counts what it judged."""

    clock: Clock
    sink: OtlpSink
    telemetry: Telemetry | None = None
    monitors: list[Monitor] = field(default_factory=list)

    def monitor(self, store: SpanStore, rules: list[Rule], **config: Any) -> Monitor:
        config.setdefault("settle_seconds", 10)
        config.setdefault("retention_seconds", None)
        config.setdefault("concurrency", 1)  # one job at a time: hits within a tick are certain
        emitter = ScoreEmitter(
            span_exporter=OTLPSpanExporter(endpoint=self.sink.traces_url, timeout=2),
            log_exporter=OTLPLogExporter(endpoint=self.sink.logs_url, timeout=2),
        )
        mon = Monitor(
            rules,
            store=store,
            emitter=emitter,
            telemetry=self.telemetry,
            clock=self.clock,
            config=MonitorConfig(**config),
        )
        self.monitors.append(mon)
        return mon


@pytest.fixture
def loop(clock: Clock, sink: OtlpSink) -> Iterator[Loop]:
    built = Loop(clock, sink)
    yield built
    for mon in built.monitors:
        with contextlib.suppress(Exception):
            mon.stop(timeout=5)
        if mon.emitter is not None:
            mon.emitter.shutdown()
