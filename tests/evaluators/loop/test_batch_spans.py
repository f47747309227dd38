"""A claim batch's jobs of one trace load that trace once (issue 30 item 7), on SQLite and
PostgreSQL: each job read its whole trace before, so a trace of 50,000 spans with 1,000 LLM
calls was read 1,000 times. Counted in store reads, never timed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.models import Job
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.batch_spans import BatchSpans
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import observe
from tests.support.stores import BACKENDS, schema_name, stores_on

CALLS = 8  # LLM calls in the one trace: one claim batch of CALLS jobs


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SpanStore]:
    """The loop's store (conftest's ``app`` writes into it), on each backend."""
    with stores_on(str(request.param), tmp_path / "spans.db", schema_name()) as make:
        yield make()


@observe(kind="llm", model="app-model")
def chat(messages: list[dict[str, str]], answer: str) -> str:
    return answer


@observe(kind="agent", name="support")
def agent(question: str) -> str:
    return " ".join(
        chat([{"role": "user", "content": f"{question} part {n}"}], f"Answer {n}.")
        for n in range(CALLS)
    )


def count_trace_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the store's whole-trace reads, by trace id."""
    reads: Counter[str] = Counter()
    read = store.trace_spans

    def counted(trace_id: str) -> list[SpanRecord]:
        reads[trace_id] += 1
        return list(read(trace_id))

    monkeypatch.setattr(store, "trace_spans", counted)
    return reads


def test_a_batch_of_jobs_of_one_trace_reads_it_once(
    app: Any, store: Any, sink: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedJudgeServer() as server:
        server.add_rule({"opinions": []}, schema="Opinions")
        agent("Where is my parcel?")
        app.flush()
        clock.advance(30)
        reads = count_trace_reads(store, monkeypatch)
        mon = Monitor(
            [Rule(BiasMetric(model=server.judge()), target="llm", name="bias-llm")],
            store=store,
            emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url)),
            clock=clock,
            config=MonitorConfig(
                settle_seconds=10, retention_seconds=None, concurrency=CALLS, batch_size=CALLS
            ),
        )
        try:
            report = mon.tick()
        finally:
            mon.close()

    assert (report.claimed, report.scored, report.missing) == (CALLS, CALLS, 0)
    results = store.results(rule="bias-llm")
    assert sorted(r.status for r in results) == ["scored"] * CALLS
    assert len({r.target_id for r in results}) == CALLS, "each job found its own target"
    [trace_id] = {r.trace_id for r in results}
    assert reads[trace_id] == 1, f"{CALLS} jobs of one trace in one batch read it {reads}"


class _Reads:
    """A store whose traces are one span each, counting reads."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()

    def trace_spans(self, trace_id: str) -> list[SpanRecord]:
        self.reads[trace_id] += 1
        return [SpanRecord(trace_id, "00000000000000aa", "root", 1, 2)]

    def trace_logs(self, trace_ids: list[str]) -> list[Any]:
        return []


def _job(n: int, trace_id: str, target_type: str = "llm") -> Job:
    return Job("r", target_type, f"{n:016x}", trace_id, f"{n:016x}", job_id=n)  # type: ignore[arg-type]


def test_a_shared_trace_is_dropped_once_its_last_job_took_it() -> None:
    rule = Rule(BiasMetric(model="openai/unused"), target="llm", name="r")
    store = _Reads()
    shared = BatchSpans([_job(1, "a"), _job(2, "a"), _job(3, "a"), _job(4, "b")])
    for _ in range(3):
        shared.take(store, rule, "a")  # type: ignore[arg-type]
    shared.take(store, rule, "b")  # type: ignore[arg-type]
    assert store.reads == {"a": 1, "b": 1}
    # every job of "a" took it: the batch no longer holds its spans (a fourth take reads again)
    shared.take(store, rule, "a")  # type: ignore[arg-type]
    assert store.reads["a"] == 2
