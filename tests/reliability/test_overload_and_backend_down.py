"""Overload and a dead backend: the app never waits on spanjudge, and the counters tell the truth.

(a) The app makes far more spans than a stalled store takes (its ``write_spans`` waits on an
Event the test holds): the exporter's queue stays within its bound, every app call completes
while the store is still stalled, the spans that did not fit are dropped and counted, and once
the store moves again the backlog drains and the monitor evaluates what was stored.

(b) The OTLP backend refuses connections: app calls and monitor ticks complete, the score
emitter counts its failed exports, results stay unemitted in the store, and once the backend is
back a later tick re-sends them with the same span ids.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import DROP_EXPORT_FAILED, ScoreEmitter
from spanjudge.exporters._store_spans import QUEUE_FULL, StoreSpanExporter
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.loop.conftest import App
from tests.reliability.app import ANSWER, SPANS_PER_TURN, agent
from tests.reliability.probes import prom, sink_on_port
from tests.support.ports import closed_port

LEASE = 30.0


class StalledStore(SQLiteStore):
    """A store whose writes wait until the test opens ``gate`` (a store that is not keeping up)."""

    def __init__(self, path: Path, gate: threading.Event) -> None:
        super().__init__(path)
        self.gate = gate
        self.writing = threading.Event()  # set once the writer is inside write_spans

    def write_spans(self, spans: Sequence[SpanRecord], *, now: float | None = None) -> None:
        self.writing.set()
        self.gate.wait(60)
        super().write_spans(spans, now=now)


def test_span_flood_into_a_stalled_store_is_bounded_counted_and_drained(
    route_spans: Any,
    clock: Any,
    healthy_judge_server: ScriptedJudgeServer,
    sink: Any,
    registry: Any,
    telemetry: Any,
    tmp_path: Path,
) -> None:
    """Expected: 200 agent turns (600 spans) against a store that takes nothing: every call
    returns its value while the store is still stalled, the queue (waiting + in flight) never
    exceeds max_queue_spans, dropped == produced - stored (all queue_full), the same in
    Prometheus; after the store moves the queued spans are written, and the monitor evaluates
    exactly the agent turns whose spans were stored, each once."""
    gate = threading.Event()
    store = StalledStore(tmp_path / "spans.db", gate)
    bound = 32
    exporter = StoreSpanExporter(
        store,
        max_queue_spans=bound,
        batch_size=8,
        flush_interval=0.01,
        clock=clock,
        on_written=telemetry.record_exporter_written,
        on_dropped=telemetry.record_exporter_dropped,
    )
    route_spans(SimpleSpanProcessor(exporter))
    try:
        turns, max_queued = 200, 0
        for i in range(turns):
            answer = f"{ANSWER} ({i})"
            assert agent(f"Question {i} about returns?", answer) == answer
            max_queued = max(max_queued, exporter.queued)
        produced = turns * SPANS_PER_TURN
        # every call came back while the store had not finished a single write
        assert store.writing.is_set() and not gate.is_set() and exporter.written == 0
        assert max_queued <= bound
        assert exporter.dropped == {QUEUE_FULL: produced - bound}
        assert prom(registry, "spanjudge_exporter_dropped_spans_total", reason=QUEUE_FULL) == (
            produced - bound
        )

        gate.set()
        assert exporter.force_flush(10_000)
        assert exporter.written == bound
        assert exporter.dropped_total == produced - exporter.written  # the counters add up
        assert prom(registry, "spanjudge_exporter_written_spans_total") == bound

        stored = [
            span
            for trace_id in store.targets_since(since=0, until=1e13)[0]
            for span in store.trace_spans(trace_id)
        ]
        assert len(stored) == bound
        agent_spans = {
            s.span_id
            for s in stored
            if s.attributes.get(attrs.GEN_AI_OPERATION_NAME) == "invoke_agent"
        }
        assert len(agent_spans) == bound // SPANS_PER_TURN  # whole turns, then one without a root

        mon = Monitor(
            [Rule(BiasMetric(model=healthy_judge_server.judge(timeout=10.0)), target="agent")],
            store=store,
            emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url)),
            clock=clock,
            config=MonitorConfig(settle_seconds=10, retention_seconds=None),
        )
        clock.advance(11)
        assert mon.tick().scored == len(agent_spans)
        results = store.results()
        assert {r.target_id for r in results} == agent_spans and len(results) == len(agent_spans)
        assert {s.span_id for s in sink.spans} == {r.evaluation_span_id for r in results}
        clock.advance(1000)  # the rootless trace settles too; it has no agent target
        assert mon.tick().claimed == 0
        mon.close()
    finally:
        gate.set()
        exporter.shutdown()
        store.close()


def test_backend_down_counts_failed_exports_and_resends_with_the_same_ids_when_back(
    route_spans: Any,
    clock: Any,
    healthy_judge_server: ScriptedJudgeServer,
    registry: Any,
    telemetry: Any,
    tmp_path: Path,
) -> None:
    """Expected: with the OTLP endpoint refusing connections, app calls (whose own OTLP
    exporter also points there) return unchanged and monitor ticks complete; the emitter counts
    every evaluation span as export_failed (also in Prometheus) and the results stay unemitted;
    within a lease nothing is re-sent; once a backend listens on that port, a tick a lease later
    sends each result once, with its deterministic span id, and marks it emitted."""
    port = closed_port()
    dead = f"http://127.0.0.1:{port}/v1/traces"
    store = SQLiteStore(tmp_path / "spans.db")
    app = App(store, clock)
    app_otlp = BatchSpanProcessor(OTLPSpanExporter(endpoint=dead, timeout=1))
    both = SynchronousMultiSpanProcessor()
    both.add_span_processor(app.processor)
    both.add_span_processor(app_otlp)
    route_spans(both)
    emitter = ScoreEmitter(
        span_exporter=OTLPSpanExporter(endpoint=dead, timeout=1), telemetry=telemetry
    )
    mon = Monitor(
        [Rule(BiasMetric(model=healthy_judge_server.judge(timeout=10.0)), target="agent")],
        store=store,
        emitter=emitter,
        telemetry=telemetry,
        clock=clock,
        config=MonitorConfig(settle_seconds=10, lease_seconds=LEASE, retention_seconds=None),
    )
    try:
        for i in range(3):
            answer = f"{ANSWER} ({i})"
            assert agent(f"Question {i} about returns?", answer) == answer
        app.flush()
        clock.advance(11)
        report = mon.tick()
        assert report.scored == 3
        assert emitter.dropped == {DROP_EXPORT_FAILED: 3} and emitter.exported == 0
        assert (
            prom(registry, "spanjudge_emitter_dropped_spans_total", reason=DROP_EXPORT_FAILED) == 3
        )
        assert (
            len(store.unemitted_results(outputs=["span"])) == 3
        )  # not marked emitted: nobody received them

        clock.advance(1)
        early = mon.tick()  # within a lease: a live evaluator might still be emitting them
        assert early.reemitted == 0 and emitter.dropped_total == 3

        with sink_on_port(port) as sink:
            clock.advance(LEASE)
            back = mon.tick()
            assert back.reemitted == 3 and back.claimed == 0
            results = store.results()
            assert sorted(s.span_id for s in sink.spans) == sorted(
                r.evaluation_span_id for r in results
            )
            assert store.unemitted_results(outputs=["span"]) == []
            clock.advance(LEASE + 1)
            assert mon.tick().reemitted == 0
            assert len(sink.spans) == 3
        assert emitter.exported == 3 and emitter.dropped_total == 3
    finally:
        mon.close()
        both.shutdown()
        store.close()
