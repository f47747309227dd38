"""Each label leaves once as a ``spanjudge.feedback`` log event on its span, through the score
emitter's event output: at once when posted to a worker, from the evaluation loop otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from spanjudge._core.span_record import FeedbackRecord
from spanjudge._store.sql import SpanStore
from spanjudge.exporters._delivery import Delivery
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.exporters._emit.evaluation_result import feedback_event
from spanjudge.settings import load_settings
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.service import Worker
from tests.feedback.conftest import (
    CONVERSATION,
    LLM_SPAN,
    NOW,
    ROOT_SPAN,
    TRACE,
    TURN_2,
    TURN_TRACE,
    Seeded,
)

LEASE = 300.0


def test_the_event_carries_the_label_on_its_span() -> None:
    label = FeedbackRecord(
        metric="faithfulness", label="fail", trace_id=TRACE, span_id=LLM_SPAN, rule="faith",
        score=0.2, note="90 days is wrong", annotator="dana", source="http", created_at=NOW,
        feedback_id=7,
    )  # fmt: skip
    event = feedback_event(label, LLM_SPAN).log_record
    assert event.event_name == "spanjudge.feedback"
    assert (event.trace_id, event.span_id) == (int(TRACE, 16), int(LLM_SPAN, 16))
    assert event.timestamp == int(NOW * 1e9)
    assert event.body == "human feedback by dana: faithfulness fail: 90 days is wrong"
    assert dict(event.attributes or {}) == {
        attrs.GEN_AI_EVALUATION_NAME: "faithfulness",
        attrs.GEN_AI_EVALUATION_SCORE_LABEL: "fail",
        attrs.GEN_AI_EVALUATION_SCORE_VALUE: 0.2,
        attrs.GEN_AI_EVALUATION_EXPLANATION: "90 days is wrong",
        attrs.SPANJUDGE_FEEDBACK_ID: 7,
        attrs.SPANJUDGE_FEEDBACK_SOURCE: "http",
        attrs.SPANJUDGE_FEEDBACK_ANNOTATOR: "dana",
        attrs.SPANJUDGE_EVAL_RULE: "faith",
    }
    bare = feedback_event(FeedbackRecord("bias", "pass", trace_id=TRACE), None).log_record
    assert bare.span_id == 0 and bare.body == "human feedback: bias pass"
    with pytest.raises(ValueError, match="without a trace id"):
        feedback_event(FeedbackRecord("bias", "pass", conversation_id="c"), None)


@pytest.fixture
def logs() -> InMemoryLogRecordExporter:
    return InMemoryLogRecordExporter()


@pytest.fixture
def emitter(logs: InMemoryLogRecordExporter) -> Iterator[ScoreEmitter]:
    made = ScoreEmitter(outputs=["event"], log_exporter=logs)
    yield made
    made.shutdown(5)


def placed(logs: InMemoryLogRecordExporter) -> list[tuple[str, str, str]]:
    out = []
    for item in logs.get_finished_logs():
        record = item.log_record
        name = (record.attributes or {})[attrs.GEN_AI_EVALUATION_NAME]
        out.append((str(name), f"{record.trace_id:032x}", f"{record.span_id:016x}"))
    return out


def test_the_loop_sends_labels_older_than_a_lease_once(
    seeded: Seeded, emitter: ScoreEmitter, logs: InMemoryLogRecordExporter
) -> None:
    store = seeded.store
    store.add_feedback(
        [
            FeedbackRecord("faithfulness", "fail", trace_id=TRACE, span_id=LLM_SPAN),
            FeedbackRecord("bias", "pass", trace_id=TRACE),  # on the root span
            FeedbackRecord("topic_adherence", "fail", conversation_id=CONVERSATION,
                           trace_id=TURN_TRACE),  # on the latest turn
        ],
        now=NOW,
    )  # fmt: skip
    [fresh] = store.add_feedback([FeedbackRecord("bias", "fail", trace_id=TRACE)], now=NOW + 250)
    delivery = Delivery(store, emitter, clock=lambda: NOW, lease_seconds=LEASE)
    # a label younger than a lease may still be sent by the process that stored it
    assert delivery.reemit_feedback(NOW + LEASE, flush_timeout=5) == 3
    assert sorted(placed(logs)) == [
        ("bias", TRACE, ROOT_SPAN),
        ("faithfulness", TRACE, LLM_SPAN),
        ("topic_adherence", TURN_TRACE, TURN_2),
    ]
    assert [f.feedback_id for f in store.unemitted_feedback()] == [fresh]
    assert delivery.reemit_feedback(NOW + LEASE, flush_timeout=5) == 0  # sent once
    assert delivery.reemit_feedback(NOW + 250 + LEASE, flush_timeout=5) == 1
    assert store.unemitted_feedback() == [] and len(placed(logs)) == 4


def test_without_the_event_output_labels_wait_in_the_store(seeded: Seeded) -> None:
    spans_only = ScoreEmitter(outputs=["span"], span_exporter=InMemorySpanExporter())
    try:
        seeded.store.add_feedback([FeedbackRecord("bias", "pass", trace_id=TRACE)], now=NOW)
        delivery = Delivery(seeded.store, spans_only, clock=lambda: NOW, lease_seconds=LEASE)
        assert delivery.reemit_feedback(NOW + 2 * LEASE, flush_timeout=1) == 0
        assert len(seeded.store.unemitted_feedback()) == 1
    finally:
        spans_only.shutdown(1)


@pytest.fixture
def worker(store_path: Path, logs: InMemoryLogRecordExporter) -> Iterator[Worker]:
    from spanjudge.evaluators._review.explain import OfflineJudge

    settings = load_settings(
        None,
        store_url=f"sqlite:///{store_path}",
        rules=[{"metric": "faithfulness", "target": "llm", "name": "faithfulness-llm"}],
        agreement_min_labels=1,
    )
    made = Worker(settings, judge=OfflineJudge(), span_exporter=InMemorySpanExporter(),
                  log_exporter=logs)  # fmt: skip
    yield made
    made.emitter.shutdown(5)
    made.meter_provider.shutdown()
    made.store.close()


def failed_faithfulness(store: SpanStore) -> Any:
    [failed] = [r for r in store.results(metric="faithfulness") if r.label == "fail"]
    return failed


def test_a_label_posted_to_the_worker_leaves_at_once_and_is_marked(
    worker: Worker, logs: InMemoryLogRecordExporter
) -> None:
    failed = failed_faithfulness(worker.store)
    body = {"trace_id": failed.trace_id, "span_id": failed.span_id, "metric": "faithfulness",
            "label": "pass", "annotator": "dana"}  # fmt: skip
    answer = TestClient(worker.app).post("/v1/feedback", json=body)
    assert answer.status_code == 200, answer.text
    assert worker.emitter.force_flush(5)
    assert placed(logs) == [("faithfulness", failed.trace_id, failed.span_id)]
    worker.monitor.tick()  # the loop marks what the exporter confirmed
    assert worker.store.unemitted_feedback() == []
    assert len(placed(logs)) == 1
    # and the agreement gauge rows follow at once: the judge failed it, the person passed it
    rows = {(rule, stat): value for rule, _, stat, value in worker.agreement_rows()}
    assert rows[("faithfulness-llm", "labels")] == 1.0
    assert rows[("faithfulness-llm", "accuracy")] == 0.0
