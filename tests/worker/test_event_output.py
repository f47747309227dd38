"""The worker's ``event`` output: with the default ``outputs`` every result reaches the
downstream endpoint twice over, as an evaluation span on ``/v1/traces`` and as a
``gen_ai.evaluation.result`` log record on ``/v1/logs`` carrying the evaluated span's ids."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.decode import decode_protobuf
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.service import Worker
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink, ReceivedLog, ReceivedSpan
from tests.worker.conftest import base_config

SETTLE, IDLE = 0.3, 0.5


@pytest.fixture
def demo_records(demo_request: Any) -> list[SpanRecord]:
    return decode_protobuf(demo_request.SerializeToString())


@pytest.fixture
def make_worker(
    tmp_path: Path, offline_judge: ScriptedJudgeServer
) -> Iterator[Callable[..., Worker]]:
    made: list[Worker] = []

    def make(downstream: str | None, clock: Clock, **overrides: Any) -> Worker:
        config = base_config(offline_judge, f"sqlite:///{tmp_path}/events.db", "unused")
        config.update(downstream_endpoint=downstream, **overrides)
        worker = Worker(load_settings(None, **config), clock=clock)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        with contextlib.suppress(Exception):
            worker.emitter.shutdown(5)
        with contextlib.suppress(Exception):
            worker.store.close()


def evaluate_everything(worker: Worker, records: list[SpanRecord], clock: Clock) -> None:
    worker.gate.write(records)
    clock.now += SETTLE + 1
    worker.monitor.tick()
    clock.now += IDLE + 1
    worker.monitor.tick()  # the conversation has gone idle
    assert worker.emitter.force_flush(10)


def _evaluations(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [s for s in spans if attrs.GEN_AI_EVALUATION_NAME in s.attributes]


def _by_target(logs: list[ReceivedLog]) -> Counter[tuple[str, str, str]]:
    return Counter((e.trace_id, e.span_id, e.attributes[attrs.SPANJUDGE_EVAL_RULE]) for e in logs)


def test_by_default_each_result_reaches_the_downstream_as_a_span_and_an_event(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    clock = Clock(time.time())
    with OtlpSink() as sink:
        worker = make_worker(sink.endpoint, clock)  # a base URL: /v1/traces and /v1/logs
        assert worker.emitter.outputs == ("span", "event")
        evaluate_everything(worker, demo_records, clock)
        results = worker.store.results()
        assert {r.rule for r in results} == {"faith", "bias", "topics"}
        logs = sink.wait_for_logs(lambda got: len(got) >= len(results))
        spans = _evaluations(sink.wait_for(lambda got: len(got) >= len(results)))
        worker.emitter.shutdown(5)

    sent = {(r.trace_id, r.span_id): r for r in demo_records}
    # one event per result, on the span the result evaluated (the ids the app sent)
    assert _by_target(logs) == Counter({(r.trace_id, r.span_id, r.rule): 1 for r in results})
    for event in logs:
        assert (event.trace_id, event.span_id) in sent
        assert event.event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT
        assert event.resource["service.name"] == "spanjudge-worker"
        assert event.scope_name == "spanjudge"
    faith = [e for e in logs if e.attributes[attrs.SPANJUDGE_EVAL_RULE] == "faith"]
    assert faith and all(
        sent[(e.trace_id, e.span_id)].attributes[attrs.GEN_AI_OPERATION_NAME] == "chat"
        for e in faith
    )
    # ... beside the evaluation span, which hangs under that same span
    assert sorted((s.trace_id, s.parent_span_id) for s in spans) == sorted(
        (e.trace_id, e.span_id) for e in logs
    )
    assert worker.store.unemitted_results() == []


def test_the_event_output_alone_sends_no_evaluation_span(
    make_worker: Callable[..., Worker], demo_records: list[SpanRecord]
) -> None:
    clock = Clock(time.time())
    with OtlpSink() as sink:
        worker = make_worker(sink.endpoint, clock, outputs=["event"])
        evaluate_everything(worker, demo_records, clock)
        results = worker.store.results()
        logs = sink.wait_for_logs(lambda got: len(got) >= len(results))
        worker.emitter.shutdown(5)
    assert results and len(logs) == len(results)
    assert _evaluations(sink.spans) == []
    assert worker.store.unemitted_results(outputs=["event"]) == []


def test_without_a_downstream_the_standard_logs_endpoint_variable_is_honoured(
    make_worker: Callable[..., Worker],
    demo_records: list[SpanRecord],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(time.time())
    with OtlpSink() as sink:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", sink.logs_url)
        worker = make_worker(None, clock, outputs=["event"])
        evaluate_everything(worker, demo_records, clock)
        results = worker.store.results()
        logs = sink.wait_for_logs(lambda got: len(got) >= len(results))
        worker.emitter.shutdown(5)
    assert results
    assert _by_target(logs) == Counter({(r.trace_id, r.span_id, r.rule): 1 for r in results})


def test_a_worker_process_sends_events_to_the_downstream_logs_endpoint(
    tmp_path: Path, demo_request: Any, offline_judge: ScriptedJudgeServer, start_worker: Any
) -> None:
    with OtlpSink() as sink:
        worker = start_worker(
            base_config(offline_judge, f"sqlite:///{tmp_path}/w.db", sink.endpoint)
        )
        worker.wait_ready()
        assert worker.post(demo_request).status_code == 200
        sent = {
            (s.trace_id.hex(), s.span_id.hex())
            for rs in demo_request.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        }
        rules = lambda logs: {e.attributes[attrs.SPANJUDGE_EVAL_RULE] for e in logs}  # noqa: E731
        logs = sink.wait_for_logs(lambda got: rules(got) == {"faith", "bias", "topics"}, 30)
        assert worker.terminate() == 0
    logs = list(sink.logs)  # everything the worker flushed on its way out
    assert all((e.trace_id, e.span_id) in sent for e in logs)
    assert all(e.event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT for e in logs)
    assert max(_by_target(logs).values()) == 1  # no result sent twice
    evaluations = _evaluations(sink.spans)
    assert {(s.trace_id, s.parent_span_id) for s in evaluations} == {
        (e.trace_id, e.span_id) for e in logs
    }


def test_a_traces_only_downstream_gets_every_span_warns_once_and_is_owed_no_event(
    make_worker: Callable[..., Worker],
    demo_records: list[SpanRecord],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Jaeger, Tempo and Phoenix answer 404/405 on /v1/logs: with the default outputs the
    evaluation spans land, one WARNING says what to do, and no event stays owed (issue 30
    item 10: the events used to be owed forever, behind one opaque exporter ERROR)."""
    clock = Clock(time.time())
    with OtlpSink(traces_only=True) as sink:
        worker = make_worker(sink.endpoint, clock)  # default outputs: span and event
        assert worker.emitter.outputs == ("span", "event")
        evaluate_everything(worker, demo_records, clock)
        results = worker.store.results()
        spans = _evaluations(sink.wait_for(lambda got: len(_evaluations(got)) >= len(results)))
        clock.now += 3600  # an hour later, with a tick re-sending whatever is still owed
        worker.monitor.tick()
        assert worker.emitter.force_flush(10)
        worker.monitor.tick()
        refused = sink.refused_log_requests
        worker.emitter.shutdown(5)
    assert results and {s.span_id for s in spans} == {r.evaluation_span_id for r in results}
    assert worker.store.unemitted_results() == []  # nothing owed, to either output
    assert refused == 1  # told once; the later events were not sent at all
    assert worker.emitter.events_not_accepted == len(results)
    # about the delivery: one WARNING (the planner may warn about the traffic, not counted)
    warnings = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("spanjudge.emit", "opentelemetry"))
    ]
    assert len(warnings) == 1 and 'outputs = ["span"]' in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert f"spanjudge_emitter_events_not_accepted_total {len(results)}.0" in _scrape(worker)


def _scrape(worker: Worker) -> str:
    from prometheus_client import generate_latest

    lines = generate_latest(worker.registry).decode().splitlines()
    return "\n".join(
        line.split("{")[0] + " " + line.rsplit(" ", 1)[1] for line in lines if line[:1] != "#"
    )
