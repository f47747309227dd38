"""The result sinks against scripted product APIs (httpx.MockTransport): what each result
becomes, how each answer is read (written, tried again, refused once with a WARNING and a
counter), and how the delivery marks wait for every sink (issue 39 item 1). The same sinks
against a real Phoenix and a real MLflow: tests/worker/test_phoenix.py, test_mlflow.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from spanjudge._core.span_record import FeedbackRecord
from spanjudge.errors import ConfigError
from spanjudge.exporters._delivery import Confirmations, Delivery
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.exporters._sinks import (
    UNKNOWN_TARGET_GRACE_SECONDS,
    MlflowSink,
    PhoenixSink,
    SinkItem,
    sinks_from_settings,
)
from spanjudge.exporters._sinks.phoenix import annotation
from tests.exporters.emit.conftest import SPAN_ID, TRACE_ID, make_record

NOW = 1_700_000_100.0
Handler = Callable[[httpx.Request], httpx.Response]


class Product:
    """A scripted product: records every request, answers with ``answer(request)``."""

    def __init__(self, answer: Handler) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests if r.method == "POST"]


def phoenix(answer: Handler, **kwargs: Any) -> tuple[PhoenixSink, Product]:
    product = Product(answer)
    sink = PhoenixSink(
        "http://phoenix:6006/", clock=lambda: NOW, transport=httpx.MockTransport(product), **kwargs
    )
    return sink, product


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"data": []})


# ------------------------------------------------------------------ Phoenix: what is written
def test_a_span_result_is_a_span_annotation_by_the_llm_with_label_score_and_reason() -> None:
    sink, product = phoenix(ok, api_key="px-key")
    assert sink.export([SinkItem(record=make_record(score=0.4, label="fail", success=False))])
    [request] = product.requests
    assert request.url.path == "/v1/span_annotations"
    assert request.url.params["sync"] == "true"  # an unknown span is a 404, not a silent drop
    assert request.headers["authorization"] == "Bearer px-key"
    [body] = json.loads(request.content)["data"]
    assert body["span_id"] == SPAN_ID and body["name"] == "faithfulness"
    assert body["annotator_kind"] == "LLM"
    assert body["result"] == {
        "score": 0.4,
        "label": "fail",
        "explanation": "3 of 4 claims are supported by the context",
    }
    # the stable id Phoenix upserts on: the result sent twice is one annotation
    assert body["identifier"] == "spanjudge:" + make_record().evaluation_span_id
    assert body["metadata"]["threshold"] == 0.5 and body["metadata"]["judge_model"]


def test_trace_and_conversation_results_are_trace_annotations_and_a_session_one() -> None:
    trace = make_record(rule="bias-trace", metric="bias", target_type="trace", target_id=TRACE_ID)
    talk = make_record(
        rule="topics", metric="topic_adherence", target_type="conversation", target_id="conv-42"
    )
    kinds = [kind for kind, _ in annotation(SinkItem(record=trace))]
    assert kinds == ["trace"]
    [(_, on_trace), (_, on_session)] = annotation(SinkItem(record=talk))
    assert on_trace["trace_id"] == TRACE_ID and "span_id" not in on_trace
    assert on_session["session_id"] == "conv-42"


def test_a_session_phoenix_does_not_have_is_no_refusal() -> None:
    # the app's spans carry no session.id: the trace annotation holds the result
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/session_annotations":
            return httpx.Response(404, json={"detail": "Session not found"})
        return ok(request)

    sink, _ = phoenix(answer)
    talk = make_record(metric="topic_adherence", target_type="conversation", target_id="c1")
    assert sink.export([SinkItem(record=talk)])
    assert sink.refused == 0


def test_a_human_label_is_a_human_annotation_upserted_per_annotator() -> None:
    sink, product = phoenix(ok)
    label = FeedbackRecord(
        feedback_id=9, trace_id=TRACE_ID, metric="faithfulness", label="fail",
        created_at=NOW, annotator="ana", note="cites the wrong policy",
    )  # fmt: skip
    assert sink.export([SinkItem(label=label, span_id=SPAN_ID)])
    [[body]] = [b["data"] for b in product.bodies()]
    assert body["annotator_kind"] == "HUMAN" and body["span_id"] == SPAN_ID
    assert body["result"] == {"label": "fail", "explanation": "cites the wrong policy"}
    assert body["identifier"] == "spanjudge:human:ana"  # her newer label replaces this one


def test_results_without_a_score_write_nothing_and_settle() -> None:
    sink, product = phoenix(ok)
    error = make_record(status="error", score=None, label=None, error_type="judge_timeout")
    assert sink.export([SinkItem(record=error)])
    assert product.requests == []


# ------------------------------------------------------------------ answers
def test_a_refused_key_is_one_warning_and_counted_never_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[int] = []
    sink, _ = phoenix(lambda r: httpx.Response(401, text="bad key"), on_refused=counted.append)
    with caplog.at_level(logging.WARNING, "spanjudge.emitter"):
        for _ in range(3):
            assert sink.export([SinkItem(record=make_record())])  # settled: not owed again
    assert sink.refused == 3 and counted == [1, 1, 1]
    [line] = [r.getMessage() for r in caplog.records]
    assert "HTTP 401" in line and "phoenix" in line and "bad key" in line
    assert "reason='refused'" in line


def test_an_outage_is_tried_again_and_not_counted_refused() -> None:
    for answer in (
        lambda r: httpx.Response(503),
        lambda r: httpx.Response(429),
    ):
        sink, _ = phoenix(answer)
        assert not sink.export([SinkItem(record=make_record())])
        assert sink.refused == 0

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    sink, _ = phoenix(down)
    assert not sink.export([SinkItem(record=make_record())])


def test_an_unknown_span_is_tried_again_while_young_then_refused() -> None:
    missing = "1111111111111111"

    def answer(request: httpx.Request) -> httpx.Response:
        data = json.loads(request.content)["data"]
        if any(d["span_id"] == missing for d in data):
            return httpx.Response(404, json={"detail": f"Spans with IDs {missing} do not exist."})
        return ok(request)

    young = make_record(span_id=missing, target_id=missing, finished_at=NOW - 5)
    old = make_record(
        span_id=missing, target_id=missing, finished_at=NOW - UNKNOWN_TARGET_GRACE_SECONDS - 1
    )
    sink, product = phoenix(answer)
    # one unknown span fails Phoenix's whole batch: the sink tells which, one at a time
    assert not sink.export([SinkItem(record=make_record()), SinkItem(record=young)])
    assert [len(b["data"]) for b in product.bodies()] == [2, 1, 1]
    assert sink.refused == 0
    assert sink.export([SinkItem(record=make_record()), SinkItem(record=old)])
    assert sink.refused == 1


# ------------------------------------------------------------------ MLflow
class MlflowDouble:
    """MLflow's trace-info and assessment routes, keeping what was written."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.assessments: dict[str, list[dict[str, Any]]] = {t: [] for t in known}
        self.posts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.split("/")
        trace = parts[5]
        if trace not in self.known:
            return httpx.Response(404, json={"error_code": "RESOURCE_DOES_NOT_EXIST"})
        if request.method == "GET":
            info = {"trace_id": trace, "assessments": self.assessments[trace]}
            return httpx.Response(200, json={"trace": {"trace_info": info}})
        self.posts += 1
        body = json.loads(request.content)["assessment"]
        self.assessments[trace].append(body)
        return httpx.Response(200, json={"assessment": body})


def test_mlflow_gets_a_score_and_a_label_feedback_from_the_judge_written_once() -> None:
    trace = "tr-" + TRACE_ID
    double = MlflowDouble({trace})
    sink = MlflowSink(
        "http://mlflow:5000", token="t0k", clock=lambda: NOW, transport=httpx.MockTransport(double)
    )
    record = make_record(score=0.4, label="fail", success=False)
    assert sink.export([SinkItem(record=record)])
    score, label = double.assessments[trace]
    assert score["assessment_name"] == "faithfulness" and score["feedback"] == {"value": 0.4}
    assert label["assessment_name"] == "faithfulness.label" and label["feedback"] == {
        "value": "fail"
    }
    for written in (score, label):
        assert written["source"] == {"source_type": "LLM_JUDGE", "source_id": "gpt-4o-mini"}
        assert written["rationale"] == record.reason and written["span_id"] == SPAN_ID
        assert written["trace_id"] == trace
        assert written["metadata"]["spanjudge.evaluation.id"] == record.evaluation_span_id
    # delivered again (a restart before the mark): looked up, not written twice
    assert sink.export([SinkItem(record=record)])
    assert double.posts == 2 and len(double.assessments[trace]) == 2


def test_mlflow_without_the_trace_is_refused_once_old_enough() -> None:
    double = MlflowDouble(set())
    transport = httpx.MockTransport(double)
    sink = MlflowSink("http://mlflow:5000", clock=lambda: NOW, transport=transport)
    assert not sink.export([SinkItem(record=make_record(finished_at=NOW - 1))])
    old = make_record(finished_at=NOW - UNKNOWN_TARGET_GRACE_SECONDS - 1)
    assert sink.export([SinkItem(record=old)]) and sink.refused == 1


# ------------------------------------------------------------------ settings
def test_sinks_come_from_settings_env_or_downstream_and_say_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Settings:
        downstream_endpoint = "http://collector:4318"
        phoenix_endpoint = None
        phoenix_api_key_env = "MY_PHOENIX_KEY"
        mlflow_endpoint = "http://mlflow:5000/"
        mlflow_token_env = "MLFLOW_TRACKING_TOKEN"

    monkeypatch.delenv("PHOENIX_COLLECTOR_ENDPOINT", raising=False)
    monkeypatch.setenv("MY_PHOENIX_KEY", "k1")
    sinks = sinks_from_settings(Settings(), ["span", "phoenix", "mlflow"])
    assert sinks["phoenix"].endpoint == "http://collector:4318"
    assert sinks["phoenix"].client.headers["authorization"] == "Bearer k1"
    assert sinks["mlflow"].endpoint == "http://mlflow:5000"
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", "http://px:6006/v1/traces")
    assert sinks_from_settings(Settings(), ["phoenix"])["phoenix"].endpoint == "http://px:6006"
    Settings.downstream_endpoint = None  # type: ignore[assignment]
    Settings.mlflow_endpoint = None  # type: ignore[assignment]
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ConfigError, match=r"^mlflow_endpoint: the mlflow output needs .* MLflow"):
        sinks_from_settings(Settings(), ["mlflow"])


# ------------------------------------------------------------------ delivery marks
def test_the_span_mark_waits_for_every_sink_and_resends_only_what_is_owed() -> None:
    marks = Confirmations({"span": {"span", "phoenix", "mlflow"}, "event": {"event"}})
    assert marks.add(7, "span") == []
    assert marks.add(7, "event") == [(7, "event")]
    assert marks.add(7, "phoenix") == []
    assert marks.owed(7, ["span"]) == ["mlflow"]  # the span and Phoenix took it already
    assert marks.add(7, "mlflow") == [(7, "span")]
    assert marks.owed(7, ["span"]) == ["mlflow", "phoenix", "span"]  # nothing remembered


class StoreDouble:
    def __init__(self) -> None:
        self.marked: list[tuple[list[int], str]] = []
        self.labels: list[list[int]] = []

    def mark_emitted(self, job_ids: list[int], *, now: float, output: str = "span") -> None:
        self.marked.append((sorted(job_ids), output))

    def mark_feedback_emitted(self, ids: list[int], *, now: float) -> None:
        if ids:
            self.labels.append(sorted(ids))


def test_a_sink_that_is_down_keeps_the_result_owed_until_it_takes_it() -> None:
    answers = [httpx.Response(503)]

    def flaky(request: httpx.Request) -> httpx.Response:
        return answers.pop() if answers else ok(request)

    sink, _ = phoenix(flaky)
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    emitter = ScoreEmitter(
        outputs=["span", "phoenix"], span_exporter=spans, sinks={"phoenix": sink}
    )
    store = StoreDouble()
    delivery = Delivery(store, emitter, clock=lambda: NOW, lease_seconds=60)  # type: ignore[arg-type]
    emitter.emit(make_record(), key=5)
    delivery.mark_confirmed(NOW, wait=5)
    assert store.marked == []  # the span went out, Phoenix did not take it
    emitter.emit(make_record(), key=5, outputs=["phoenix"])
    delivery.mark_confirmed(NOW, wait=5)
    assert store.marked == [([5], "span")]
    assert len(spans.get_finished_spans()) == 1  # the span was not sent again
    emitter.shutdown()


def test_a_label_is_marked_once_the_event_and_every_sink_took_it() -> None:
    sink, product = phoenix(ok)
    emitter = ScoreEmitter(outputs=["phoenix"], sinks={"phoenix": sink})
    store = StoreDouble()
    delivery = Delivery(store, emitter, clock=lambda: NOW, lease_seconds=60)  # type: ignore[arg-type]
    label = FeedbackRecord(
        feedback_id=3, trace_id=TRACE_ID, metric="bias", label="pass", created_at=NOW
    )
    assert emitter.emit_feedback(label, SPAN_ID)
    delivery.mark_confirmed(NOW, wait=5)
    assert store.labels == [[3]]
    assert product.bodies()[0]["data"][0]["annotator_kind"] == "HUMAN"
    assert not emitter.emit_feedback(
        FeedbackRecord(feedback_id=4, trace_id="0" * 32, metric="bias", label="pass"), SPAN_ID
    )
    emitter.shutdown()


# ------------------------------------------------------------------ whose service
def test_evaluation_spans_take_the_judged_service_when_they_go_to_mlflow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    worker = Resource({"service.name": "spanjudge-worker", "deployment.environment": "prod"})

    def service_of(**kwargs: Any) -> tuple[str, Any]:
        spans = InMemorySpanExporter()
        emitter = ScoreEmitter(outputs=["span"], span_exporter=spans, resource=worker, **kwargs)
        emitter.emit(make_record())
        assert emitter.force_flush(5)
        emitter.shutdown()
        [span] = spans.get_finished_spans()
        assert "spanjudge.evaluation.emitted_by" not in span.resource.attributes  # MLflow: a tag
        assert span.resource.attributes["deployment.environment"] == "prod"
        service = str(span.resource.attributes["service.name"])
        return service, (span.attributes or {}).get("spanjudge.evaluation.emitted_by")

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", raising=False)
    assert service_of() == ("spanjudge-worker", None)  # auto, not MLflow: the worker's
    assert service_of(evaluation_service="judged") == ("support-bot", "spanjudge-worker")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-mlflow-experiment-id=3")
    assert service_of() == ("support-bot", "spanjudge-worker")  # auto: MLflow's header
    assert service_of(evaluation_service="worker") == ("spanjudge-worker", None)
    with pytest.raises(ConfigError, match="evaluation_service must be one of auto"):
        service_of(evaluation_service="mine")
