"""A slow evaluation does not hold the other evaluation slots idle: the next job is claimed as
soon as a slot frees, not once the whole claimed batch has finished (three workers on one store
scaled 2.58x instead of 3x with jobs of one and two judge calls)."""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import observe


@observe(kind="agent", name="support")
def agent(question: str) -> str:
    return f"Answer to {question}"


def test_a_freed_slot_takes_the_next_job_while_a_slow_one_runs(
    app: Any, store: Any, sink: Any, clock: Any
) -> None:
    arrived: list[str] = []
    third = threading.Event()
    released: list[bool] = []
    lock = threading.Lock()

    def opinions(request: Any) -> dict[str, list[str]]:
        with lock:
            arrived.append(request.prompt)
            n = len(arrived)
        if n >= 3:
            third.set()
        if n == 1:
            # the first evaluation is slow: it answers once a third one has reached the judge,
            # which only happens if the second one's freed slot took the next job meanwhile
            released.append(third.wait(10))
        return {"opinions": []}

    with ScriptedJudgeServer() as server:
        server.add_rule(opinions, schema="Opinions")
        for i in range(3):
            agent(f"question {i}")
        app.flush()
        clock.advance(30)
        mon = Monitor(
            [Rule(BiasMetric(model=server.judge()), target="agent", name="bias")],
            store=store,
            emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url)),
            clock=clock,
            config=MonitorConfig(
                settle_seconds=10, retention_seconds=None, concurrency=2, batch_size=2
            ),
        )
        try:
            report = mon.tick()
        finally:
            mon.close()

    assert released == [True], "the third job waited for the slow one: slots were held idle"
    assert report.claimed == 3 and report.scored == 3
    results = store.results(rule="bias")
    assert sorted(r.status for r in results) == ["scored"] * 3
    sink.wait_for(
        lambda spans: len([s for s in spans if attrs.GEN_AI_EVALUATION_NAME in s.attributes]) == 3
    )
