"""The score emitter end to end: evaluation spans over real OTLP/HTTP to a loopback sink."""

from __future__ import annotations

import json
import threading

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import StatusCode

from spanjudge._core.span_record import evaluation_span_id
from spanjudge.exporters._emit.emitter import DROP_INVALID, DROP_QUEUE_FULL, ScoreEmitter
from spanjudge.exporters._emit.evaluation_result import MAX_VERDICTS_CHARS, evaluation_span
from spanjudge.tracer import _attributes as attrs
from tests.exporters.emit.conftest import SPAN_ID, TRACE_ID, make_record
from tests.support.otlp_sink import OtlpSink
from tests.support.ports import closed_port


def _emitter(sink: OtlpSink, **kwargs: object) -> ScoreEmitter:
    return ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url), **kwargs)  # type: ignore[arg-type]


def test_scored_record_becomes_evaluation_span_in_the_evaluated_trace(sink: OtlpSink) -> None:
    emitter = _emitter(sink)
    record = make_record()
    emitter.emit(record)
    assert emitter.force_flush(10)
    [span] = sink.wait_for(lambda s: len(s) == 1)
    emitter.shutdown()

    assert span.trace_id == TRACE_ID
    assert span.parent_span_id == SPAN_ID
    assert span.span_id == evaluation_span_id("faithfulness-llm", "llm", SPAN_ID)
    assert span.name == "evaluation faithfulness"
    assert span.resource["service.name"] == "spanjudge"
    # an instant at the evaluated span's end; when the judge ran is in attributes
    assert span.start_time_unix_nano == span.end_time_unix_nano == 1_700_000_000_000_000_000
    assert span.attributes[attrs.SPANJUDGE_EVAL_JUDGED_AT] == 1_700_000_012.5
    assert span.attributes[attrs.SPANJUDGE_EVAL_DURATION] == 2.5
    a = span.attributes
    assert a[attrs.GEN_AI_EVALUATION_NAME] == "faithfulness"
    assert a[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.75
    assert a[attrs.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
    assert a[attrs.GEN_AI_EVALUATION_EXPLANATION] == "3 of 4 claims are supported by the context"
    assert a[attrs.SPANJUDGE_EVAL_THRESHOLD] == 0.5
    assert a[attrs.SPANJUDGE_EVAL_SUCCESS] is True
    assert a[attrs.SPANJUDGE_EVAL_STRICT_MODE] is False
    assert a[attrs.SPANJUDGE_EVAL_JUDGE_MODEL] == "gpt-4o-mini"
    assert a[attrs.SPANJUDGE_EVAL_INPUT_TOKENS] == 120
    assert a[attrs.SPANJUDGE_EVAL_OUTPUT_TOKENS] == 30
    assert a[attrs.SPANJUDGE_EVAL_COST] == 0.0021
    assert json.loads(a[attrs.SPANJUDGE_EVAL_VERDICTS]) == [
        {"verdict": "yes", "reason": "stated in doc 1"}
    ]
    assert a[attrs.SPANJUDGE_EVAL_SAMPLE_RATE] == 0.25
    assert a[attrs.SPANJUDGE_EVAL_RULE] == "faithfulness-llm"
    assert a[attrs.SPANJUDGE_EVAL_TARGET] == "llm"
    assert a[attrs.SPANJUDGE_EVAL_TARGET_ID] == SPAN_ID
    assert attrs.ERROR_TYPE not in a
    assert attrs.GEN_AI_OPERATION_NAME not in a  # semconv defines none for evaluations
    [(event_name, event_attrs)] = span.events
    assert event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT
    assert event_attrs == {
        attrs.GEN_AI_EVALUATION_NAME: "faithfulness",
        attrs.GEN_AI_EVALUATION_SCORE_VALUE: 0.75,
        attrs.GEN_AI_EVALUATION_SCORE_LABEL: "pass",
        attrs.GEN_AI_EVALUATION_EXPLANATION: "3 of 4 claims are supported by the context",
    }
    assert span.status_code == 0  # UNSET


def test_error_record_carries_error_type_and_no_score(sink: OtlpSink) -> None:
    emitter = _emitter(sink)
    record = make_record(
        status="error",
        score=None,
        label=None,
        success=None,
        reason=None,
        error_type="JudgeOutputError",
        error_message="judge returned invalid JSON twice",
    )
    emitter.emit(record)
    [span] = sink.wait_for(lambda s: len(s) == 1)
    emitter.shutdown()
    a = span.attributes
    assert a[attrs.ERROR_TYPE] == "JudgeOutputError"
    for key in (
        attrs.GEN_AI_EVALUATION_SCORE_VALUE,
        attrs.GEN_AI_EVALUATION_SCORE_LABEL,
        attrs.SPANJUDGE_EVAL_SUCCESS,
    ):
        assert key not in a
    assert span.status_code == 2  # STATUS_CODE_ERROR
    [(_, event_attrs)] = span.events
    assert event_attrs == {
        attrs.GEN_AI_EVALUATION_NAME: "faithfulness",
        attrs.ERROR_TYPE: "JudgeOutputError",
    }


def test_skipped_record_is_missing_field_and_not_an_error_status() -> None:
    record = make_record(
        status="skipped", score=None, label=None, success=None, skip_reason="no retrieval_context"
    )
    span = evaluation_span(record)
    assert span.attributes is not None
    assert span.attributes[attrs.ERROR_TYPE] == "missing_field"
    assert span.attributes[attrs.SPANJUDGE_EVAL_SKIP_REASON] == "no retrieval_context"
    assert attrs.GEN_AI_EVALUATION_SCORE_VALUE not in span.attributes
    assert span.status.status_code is StatusCode.UNSET


def test_pure_builder_shape_and_given_resource() -> None:
    resource = Resource.create({"service.name": "my-evaluator"})
    span = evaluation_span(make_record(), resource)
    assert span.kind is SpanKind.INTERNAL
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "spanjudge"
    assert span.resource.attributes["service.name"] == "my-evaluator"
    assert span.parent is not None and span.parent.span_id == int(SPAN_ID, 16)
    assert span.context is not None and span.context.trace_id == int(TRACE_ID, 16)


def test_verdicts_json_is_bounded() -> None:
    verdicts = [{"verdict": "no", "reason": "x" * 500} for _ in range(100)]
    span = evaluation_span(make_record(verdicts=verdicts))
    assert span.attributes is not None
    text = span.attributes[attrs.SPANJUDGE_EVAL_VERDICTS]
    assert isinstance(text, str)
    assert text.startswith('[{"verdict": "no"')
    assert len(text) < MAX_VERDICTS_CHARS + 50
    assert "truncated" in text


def test_same_record_twice_gives_the_same_span_id(sink: OtlpSink) -> None:
    emitter = _emitter(sink)
    emitter.emit(make_record())
    emitter.emit(make_record(score=0.8))
    spans = sink.wait_for(lambda s: len(s) == 2)
    emitter.shutdown()
    assert spans[0].span_id == spans[1].span_id
    other = evaluation_span(make_record(rule="bias-llm", metric="bias"))
    assert other.context is not None
    assert format(other.context.span_id, "016x") != spans[0].span_id


def test_record_without_trace_id_is_dropped_not_exported(sink: OtlpSink) -> None:
    emitter = _emitter(sink)
    emitter.emit(make_record(trace_id=None))
    assert emitter.force_flush(5)
    emitter.shutdown()
    assert emitter.dropped == {DROP_INVALID: 1}
    assert sink.requests == 0


def test_emit_with_backend_down_returns_at_once_and_does_not_raise() -> None:
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces", timeout=2)
    emitter = ScoreEmitter(span_exporter=exporter)
    done = threading.Event()

    def emit_many() -> None:
        for i in range(50):
            emitter.emit(make_record(target_id=f"{i:016x}"))
        done.set()

    # emit() must not wait for the dead backend; the background thread does the trying.
    thread = threading.Thread(target=emit_many)
    thread.start()
    assert done.wait(5), "emit() blocked on a dead backend"
    emitter.shutdown(timeout_seconds=0.1)
    assert emitter.exported == 0


class _StuckExporter(SpanExporter):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.seen = 0

    def export(self, spans):  # type: ignore[no-untyped-def]
        self.release.wait(10)
        self.seen += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_bounded_queue_drops_and_counts() -> None:
    stuck = _StuckExporter()
    emitter = ScoreEmitter(span_exporter=stuck, max_queue=5)
    for i in range(40):
        emitter.emit(make_record(target_id=f"{i:016x}"))
    # The writer holds at most one batch; the queue holds at most 5: the rest are dropped.
    assert emitter.dropped.get(DROP_QUEUE_FULL, 0) >= 40 - 5 - 5
    stuck.release.set()
    assert emitter.force_flush(5)
    emitter.shutdown()
    assert stuck.seen + emitter.dropped_total == 40


def test_keys_are_confirmed_only_for_spans_the_exporter_took() -> None:
    class Switchable(SpanExporter):
        ok = False

        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS if self.ok else SpanExportResult.FAILURE

        def shutdown(self) -> None:
            pass

    exporter = Switchable()
    emitter = ScoreEmitter(span_exporter=exporter)
    try:
        emitter.emit(make_record(target_id=f"{1:016x}"), 1)
        assert emitter.force_flush(10)
        assert emitter.take_confirmed() == []  # refused: never confirmed
        exporter.ok = True
        emitter.emit(make_record(target_id=f"{2:016x}"), 2)
        emitter.emit(make_record(target_id=f"{3:016x}"))  # no key: nothing to confirm
        emitter.emit(make_record(trace_id=None), 4)  # invalid: dropped, never confirmed
        assert emitter.force_flush(10)
        assert emitter.take_confirmed() == [(2, "span")]
        assert emitter.take_confirmed() == []  # each key handed back once
    finally:
        emitter.shutdown(5)


def test_the_label_values_telemetry_primes_are_the_emitters_own() -> None:
    # telemetry spells them in metric_names so that it never imports the emitter (no cycle)
    from spanjudge._core import metric_names as names
    from spanjudge.exporters import _store_spans as span_exporter
    from spanjudge.exporters._emit import emitter

    assert set(names.EMITTER_DROP_REASONS) == {
        emitter.DROP_QUEUE_FULL,
        emitter.DROP_INVALID,
        emitter.DROP_EXPORT_FAILED,
        emitter.DROP_SHUTDOWN,
    }
    assert names.EXPORTER_DROP_REASONS == span_exporter.DROP_REASONS
