"""Enrich mode: the worker forwards every span it receives; spans a rule evaluates are held until
scored and go out with the scores as their own attributes; nothing is lost or sent twice.

Most tests drive a real :class:`Worker` in-process on a controllable clock (ticks and forwarding
by hand, the offline judge over HTTP, an in-memory exporter as the backend), on SQLite and on
PostgreSQL. The last one kills a worker process with SIGKILL mid-hold and restarts it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.decode import decode_protobuf
from spanjudge.exporters._emit.evaluation_result import score_key
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.service import Worker
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink
from tests.support.stores import BACKENDS, POSTGRES_URL, schema_name
from tests.worker.conftest import base_config, count_spans

SETTLE = 10.0
IDLE = 30.0
HOLD = 120.0


class FlakyBackend(SpanExporter):
    """An in-memory backend that refuses the first ``failures`` exports."""

    def __init__(self, failures: int = 0) -> None:
        self.memory = InMemorySpanExporter()
        self.failures = failures
        self.refused = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.failures > 0:
            self.failures -= 1
            self.refused += len(spans)
            return SpanExportResult.FAILURE
        return self.memory.export(spans)

    def shutdown(self) -> None:
        pass

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())


def is_evaluation(span: Any) -> bool:
    return attrs.GEN_AI_EVALUATION_NAME in (span.attributes or {})


def app_span_ids(backend: FlakyBackend) -> Counter[tuple[str, str]]:
    """(trace id, span id) of each forwarded app span, with how often it arrived."""
    return Counter(
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}")
        for s in backend.spans()
        if not is_evaluation(s)
    )


def assert_each_span_once(backend: FlakyBackend, records: list[SpanRecord]) -> None:
    forwarded = app_span_ids(backend)
    assert set(forwarded) == {(s.trace_id, s.span_id) for s in records}, "a span is missing"
    duplicated = [key for key, n in forwarded.items() if n > 1]
    assert not duplicated, f"forwarded more than once: {duplicated}"


@pytest.fixture
def demo_records(demo_request: Any) -> list[SpanRecord]:
    """The demo's spans as the receiver hands them over: with their bytes (a slice of the list
    is a plain list: those spans are written without, as by other callers of the gate)."""
    return decode_protobuf(demo_request.SerializeToString(), keep_bytes=True)


@pytest.fixture(params=BACKENDS)
def make_worker(
    request: pytest.FixtureRequest, tmp_path: Path, offline_judge: ScriptedJudgeServer
) -> Iterator[Callable[..., Worker]]:
    """Workers in enrich mode on ONE store (SQLite file or a fresh PostgreSQL schema)."""
    if request.param == "sqlite":
        store = {"store_url": f"sqlite:///{tmp_path}/enrich.db"}
    else:
        store = {"store_url": POSTGRES_URL, "store_schema": schema_name("sj_enrich")}
    made: list[Worker] = []

    def make(backend: SpanExporter, clock: Clock) -> Worker:
        config = base_config(offline_judge, store["store_url"], "http://127.0.0.1:9/unused")
        config.update(
            store, mode="enrich", settle_seconds=SETTLE, idle_seconds=IDLE, max_hold_seconds=HOLD
        )
        worker = Worker(load_settings(None, **config), span_exporter=backend, clock=clock)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        with contextlib.suppress(Exception):
            worker.emitter.shutdown(5)
    if request.param == "postgresql" and made:
        with contextlib.suppress(Exception):
            made[0].store.drop_schema()
    for worker in made:
        with contextlib.suppress(Exception):
            worker.store.close()


def evaluate_everything(worker: Worker, clock: Clock) -> None:
    """Settle, evaluate and release; then let conversations go idle and evaluate them."""
    clock.now += SETTLE + 1
    worker.monitor.tick()
    assert worker.enricher.drain() >= 0
    clock.now += IDLE
    worker.monitor.tick()
    worker.enricher.drain()
    assert worker.emitter.force_flush(10)


def test_unscored_spans_go_out_at_once_and_scored_ones_carry_their_scores(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    clock, backend = Clock(), FlakyBackend()
    worker = make_worker(backend, clock)
    worker.gate.write(demo_records)
    worker.enricher.drain()
    first = app_span_ids(backend)
    everything = {(s.trace_id, s.span_id) for s in demo_records}
    held = everything - set(first)
    assert held and first, "the demo has both spans to score and spans to pass through"
    assert all(
        not any(k.startswith("spanjudge.score.") for k in s.attributes) for s in backend.spans()
    )

    evaluate_everything(worker, clock)

    forwarded = app_span_ids(backend)
    assert set(forwarded) == everything and set(forwarded.values()) == {1}  # each exactly once
    # what was held is exactly what the rules evaluated: the arrival decision matches planning
    results = worker.store.results(limit=1000)
    span_results = [r for r in results if r.target_type != "conversation"]
    assert {(r.trace_id, r.span_id) for r in span_results} == held
    by_id = {f"{s.context.span_id:016x}": s for s in backend.spans() if not is_evaluation(s)}
    labels = set()
    for record in span_results:
        span = by_id[record.span_id]
        assert record.status == "scored", record
        assert span.attributes[score_key(record.metric, "value")] == pytest.approx(record.score)
        assert span.attributes[score_key(record.metric, "label")] == record.label
        assert span.attributes[score_key(record.metric, "success")] is record.success
        assert span.attributes[score_key(record.metric, "reason")] == record.reason
        labels.add(record.label)
        assert (
            dict(span.attributes).items()
            >= {  # its own attributes are all still there
                k: v
                for k, v in next(
                    s for s in demo_records if s.span_id == record.span_id
                ).attributes.items()
                if not isinstance(v, (list, dict))
            }.items()
        )
    assert labels == {"pass", "fail"}  # the demo's planted faults are caught on the spans
    # span scores ride on their spans; only the conversation is an evaluation child span
    evaluations = [s for s in backend.spans() if is_evaluation(s)]
    assert [s.attributes[attrs.SPANJUDGE_EVAL_TARGET] for s in evaluations] == ["conversation"]
    assert worker.enricher.forwarded == len(everything)
    assert worker.enricher.forwarded_held == len(held)
    stats = worker.store.stats(now=clock.now)
    assert (stats.outbox_held, stats.outbox_due) == (0, 0)


def test_a_hold_that_times_out_forwards_the_span_and_the_late_score_becomes_a_child_span(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    clock, backend = Clock(), FlakyBackend()
    worker = make_worker(backend, clock)
    worker.gate.write(demo_records)
    clock.now += HOLD  # nobody evaluated in time (say the judge was down)
    worker.enricher.drain()
    forwarded = app_span_ids(backend)
    assert set(forwarded) == {(s.trace_id, s.span_id) for s in demo_records}
    assert not any(k.startswith("spanjudge.score.") for s in backend.spans() for k in s.attributes)

    evaluate_everything(worker, clock)

    assert app_span_ids(backend) == forwarded  # not sent again
    evaluations = [s for s in backend.spans() if is_evaluation(s)]
    results = worker.store.results(limit=1000)
    assert len(evaluations) == len(results) > 1  # every score reached the trace after all
    for span in evaluations:
        record = next(
            r
            for r in results
            if r.rule == span.attributes[attrs.SPANJUDGE_EVAL_RULE]
            and r.target_id == span.attributes[attrs.SPANJUDGE_EVAL_TARGET_ID]
        )
        assert f"{span.parent.span_id:016x}" == record.span_id


def test_a_redelivered_batch_is_forwarded_once(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    clock, backend = Clock(), FlakyBackend()
    worker = make_worker(backend, clock)
    worker.gate.write(demo_records)
    worker.enricher.drain()
    clock.now += 1
    worker.gate.write(demo_records)  # a Collector retrying a batch whose 200 it never saw
    evaluate_everything(worker, clock)
    assert set(app_span_ids(backend).values()) == {1}
    assert sum(app_span_ids(backend).values()) == len(demo_records)


def test_a_backend_that_refuses_gets_everything_later_once(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    clock, backend = Clock(), FlakyBackend(failures=3)
    worker = make_worker(backend, clock)
    worker.gate.write(demo_records)
    for _ in range(3):
        worker.enricher.drain()
        clock.now += 60  # past the backoff
    assert backend.spans() == [] and backend.refused > 0
    assert worker.enricher.failed == backend.refused
    evaluate_everything(worker, clock)
    clock.now += HOLD
    worker.enricher.drain()
    assert_each_span_once(backend, demo_records)
    text = _scrape(worker)
    assert "spanjudge_enrich_forward_failed_spans_total{" in text
    assert _value(text, "spanjudge_enrich_forward_failed_spans_total") == backend.refused
    assert _value(text, "spanjudge_enrich_forwarded_spans_total", held="false") + _value(
        text, "spanjudge_enrich_forwarded_spans_total", held="true"
    ) == len(demo_records)


def test_a_restart_mid_hold_loses_and_duplicates_nothing(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    clock, backend = Clock(), FlakyBackend()
    first = make_worker(backend, clock)
    first.gate.write(demo_records)
    first.enricher.drain()
    passed = set(app_span_ids(backend))
    # the first worker dies here: held spans are only in its store
    first.store.close()
    second = make_worker(backend, clock)
    evaluate_everything(second, clock)
    assert_each_span_once(backend, demo_records)
    assert second.enricher.forwarded == len(demo_records) - len(passed)
    assert any(k.startswith("spanjudge.score.") for s in backend.spans() for k in s.attributes), (
        "the held spans went out with their scores"
    )


def _scrape(worker: Worker) -> str:
    from prometheus_client import generate_latest

    return generate_latest(worker.registry).decode()


def _value(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no series {name} {labels} in the scrape")


def test_worker_process_killed_mid_hold_then_restarted(
    tmp_path: Path, offline_judge: ScriptedJudgeServer, demo_request: Any, start_worker: Any
) -> None:
    """A real ``spanjudge worker --mode enrich`` behind OTLP: SIGKILL while spans are held, a new
    process on the same store sends each span once, the scored ones with their scores."""
    total = count_spans(demo_request)
    with OtlpSink() as sink:
        config = base_config(offline_judge, f"sqlite:///{tmp_path}/w.db", sink.endpoint)
        # the first process never settles a trace before it is killed
        slow = {**config, "mode": "enrich", "settle_seconds": 600, "max_hold_seconds": 900}
        first = start_worker(slow, "first")
        first.wait_ready()
        assert first.post(demo_request).status_code == 200
        passed = sink.wait_for(lambda spans: len(spans) > 0, timeout=20)
        first.kill()
        passed_now = len(sink.spans)
        assert 0 < passed_now < total
        assert len(passed) <= passed_now
        fast = {**config, "mode": "enrich"}
        second = start_worker(fast, "second")
        second.wait_ready()

        def done(spans: list[Any]) -> bool:
            app = [s for s in spans if attrs.GEN_AI_EVALUATION_NAME not in s.attributes]
            conv = [
                s for s in spans if s.attributes.get(attrs.SPANJUDGE_EVAL_TARGET) == "conversation"
            ]
            return len(app) >= total and bool(conv)

        spans = sink.wait_for(done, timeout=60)
        assert second.terminate() == 0
    app = Counter(
        (s.trace_id, s.span_id) for s in spans if attrs.GEN_AI_EVALUATION_NAME not in s.attributes
    )
    assert len(app) == total and set(app.values()) == {1}, app.most_common(3)
    scored = [s for s in spans if score_key("Faithfulness", "value") in s.attributes]
    assert scored, "the held LLM spans carry their faithfulness scores"
    assert all(s.attributes[score_key("Faithfulness", "label")] in ("pass", "fail") for s in scored)


def test_two_workers_on_one_store_forward_each_span_once(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    """A trace's spans arrive at different workers; each holds or passes what it received and
    either may forward it; the backend gets every span once, the scored ones with scores."""
    clock, backend = Clock(), FlakyBackend()
    workers = [make_worker(backend, clock), make_worker(backend, clock)]
    for i, worker in enumerate(workers):
        worker.gate.write(demo_records[i::2])
    clock.now += SETTLE + 1
    for worker in workers:
        worker.monitor.tick()
    clock.now += IDLE
    for worker in workers:
        worker.monitor.tick()
    for worker in reversed(workers):
        worker.enricher.drain()
    assert_each_span_once(backend, demo_records)
    results = [r for r in workers[0].store.results(limit=1000) if r.target_type != "conversation"]
    by_id = {f"{s.context.span_id:016x}": s for s in backend.spans() if not is_evaluation(s)}
    assert results and all(
        score_key(r.metric, "value") in by_id[r.span_id].attributes for r in results
    )


def test_the_readme_example_runs_offline_and_prints_scores_on_spans() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "examples/enrich_mode.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    ).stdout
    assert "not an LLM" in out
    assert "spanjudge.score.faithfulness.label = fail" in out  # the planted 90-vs-30-days answer
    assert "spanjudge.score.faithfulness.value = 0.5" in out


def test_the_hold_default_is_spelt_once_the_settings_field_names_it() -> None:
    """Issue 36: the Enricher's hold default was a second 120.0; it is now the settings
    field's own value (one object), whatever that value is."""
    import inspect

    from spanjudge.evaluators._enrich.forwarder import Enricher
    from spanjudge.settings import WorkerSettings

    default = inspect.signature(Enricher).parameters["max_hold_seconds"].default
    assert default is WorkerSettings.model_fields["max_hold_seconds"].default


class Killed(BaseException):
    """The process dies: raised by the backend after it took a request, before it answers."""


class KilledWhileAnswering(FlakyBackend):
    """Takes the first request, then the worker is killed before the answer comes (a backend
    taking 2 s a request makes this the usual moment of a SIGKILL)."""

    def __init__(self) -> None:
        super().__init__()
        self.kill = True

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        if self.kill:
            self.kill = False
            raise Killed
        return result


def test_a_kill_while_the_backend_takes_a_request_does_not_send_it_again(
    tmp_path: Path, offline_judge: ScriptedJudgeServer, demo_records: list[SpanRecord]
) -> None:
    """Issue 41: 6 SIGKILLs while the downstream took 2 s a request sent 62 of 108 spans twice;
    the request in flight is now noted beside the store and taken as delivered on restart."""
    clock, backend = Clock(), KilledWhileAnswering()
    config = base_config(offline_judge, f"sqlite:///{tmp_path}/enrich.db", "http://127.0.0.1:9")
    config.update(mode="enrich", settle_seconds=SETTLE, idle_seconds=IDLE, max_hold_seconds=HOLD)

    first = Worker(load_settings(None, **config), span_exporter=backend, clock=clock)
    first.gate.write(demo_records)
    with pytest.raises(Killed):
        first.enricher.drain()
    assert app_span_ids(backend), "the backend took the first request"
    # the process is gone: its lock on the journal and its store connections with it
    first.enricher.journal.close()
    first.store.close()
    clock.now += 120  # past the dead process's leases

    second = Worker(load_settings(None, **config), span_exporter=backend, clock=clock)
    try:
        evaluate_everything(second, clock)
        assert_each_span_once(backend, demo_records)
    finally:
        second.shutdown(5)
