"""The ``event`` output: ``gen_ai.evaluation.result`` log records through the real OTLP/HTTP log
exporter, read back from the raw protobuf requests the sink received on ``/v1/logs``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from prometheus_client import CollectorRegistry, generate_latest

from spanjudge._core.span_record import evaluation_span_id
from spanjudge._core.telemetry import Telemetry, prometheus_meter_provider
from spanjudge.exporters._emit.emitter import DROP_EXPORT_FAILED, ScoreEmitter
from spanjudge.tracer import _attributes as attrs
from tests.exporters.emit.conftest import SPAN_ID, TRACE_ID, make_record
from tests.support.otlp_sink import OtlpSink, any_value
from tests.support.ports import closed_port

RESPONSE_ID = "chatcmpl-9f2c"
# The provenance every event of make_record() carries, beside the semconv fields.
PROVENANCE = {
    attrs.SPANJUDGE_EVAL_RULE: "faithfulness-llm",
    attrs.SPANJUDGE_EVAL_TARGET: "llm",
    attrs.SPANJUDGE_EVAL_TARGET_ID: SPAN_ID,
    attrs.SPANJUDGE_EVAL_STRICT_MODE: False,
    attrs.SPANJUDGE_EVAL_THRESHOLD: 0.5,
    attrs.SPANJUDGE_EVAL_JUDGE_MODEL: "gpt-4o-mini",
    attrs.SPANJUDGE_EVAL_INPUT_TOKENS: 120,
    attrs.SPANJUDGE_EVAL_OUTPUT_TOKENS: 30,
    attrs.SPANJUDGE_EVAL_COST: 0.0021,
    attrs.SPANJUDGE_EVAL_SAMPLE_RATE: 0.25,
    # when the judge ran (the evaluation span itself sits at the evaluated span's end)
    attrs.SPANJUDGE_EVAL_JUDGED_AT: 1_700_000_012.5,
    attrs.SPANJUDGE_EVAL_DURATION: 2.5,
    # the result's stable id (the evaluation span's id): what de-duplicates a re-sent event
    attrs.SPANJUDGE_EVAL_ID: evaluation_span_id("faithfulness-llm", "llm", SPAN_ID),
}


@dataclass
class WireLog:
    """One log record as the protobuf request carried it (typed values kept)."""

    resource: dict[str, Any]
    scope_name: str
    record: Any  # opentelemetry.proto.logs.v1.logs_pb2.LogRecord

    @property
    def attributes(self) -> dict[str, Any]:
        return {kv.key: any_value(kv.value) for kv in self.record.attributes}

    def kind(self, key: str) -> str | None:
        """The protobuf AnyValue field an attribute travelled in (``double_value``...)."""
        for kv in self.record.attributes:
            if kv.key == key:
                value: AnyValue = kv.value
                return value.WhichOneof("value")
        return None


def wire_logs(sink: OtlpSink) -> list[WireLog]:
    """Every log record of every ``/v1/logs`` body, decoded here from the raw bytes."""
    out = []
    for body in list(sink.log_bodies):
        request = ExportLogsServiceRequest.FromString(body)
        for rl in request.resource_logs:
            resource = {kv.key: any_value(kv.value) for kv in rl.resource.attributes}
            for sl in rl.scope_logs:
                out.extend(WireLog(resource, sl.scope.name, r) for r in sl.log_records)
    return out


def _event_emitter(sink: OtlpSink, **kwargs: Any) -> ScoreEmitter:
    return ScoreEmitter(
        outputs=["event"], log_exporter=OTLPLogExporter(endpoint=sink.logs_url), **kwargs
    )


def _one_event(sink: OtlpSink, emitter: ScoreEmitter, record: Any) -> WireLog:
    emitter.emit(record)
    assert emitter.force_flush(10)
    sink.wait_for_logs(lambda logs: len(logs) >= 1)
    emitter.shutdown()
    [log] = wire_logs(sink)
    return log


def test_scored_event_carries_the_semconv_fields_and_provenance_on_the_evaluated_span(
    sink: OtlpSink,
) -> None:
    log = _one_event(sink, _event_emitter(sink), make_record(response_id=RESPONSE_ID))

    assert log.record.event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT
    assert log.record.trace_id.hex() == TRACE_ID
    assert log.record.span_id.hex() == SPAN_ID  # the evaluated span, not the evaluation span
    assert log.record.time_unix_nano == 1_700_000_012_500_000_000  # finished_at
    assert log.record.severity_text == "INFO"
    assert log.scope_name == attrs.TRACER_NAME == "spanjudge"
    assert log.resource["service.name"] == "spanjudge"
    assert log.attributes == {
        attrs.GEN_AI_EVALUATION_NAME: "faithfulness",
        attrs.GEN_AI_EVALUATION_SCORE_VALUE: 0.75,
        attrs.GEN_AI_EVALUATION_SCORE_LABEL: "pass",
        attrs.GEN_AI_EVALUATION_EXPLANATION: "3 of 4 claims are supported by the context",
        attrs.GEN_AI_RESPONSE_ID: RESPONSE_ID,
        attrs.SPANJUDGE_EVAL_SUCCESS: True,
        **PROVENANCE,
    }  # no verdict list (the span keeps it), no error.type
    assert log.kind(attrs.GEN_AI_EVALUATION_SCORE_VALUE) == "double_value"
    assert log.kind(attrs.SPANJUDGE_EVAL_THRESHOLD) == "double_value"
    assert log.kind(attrs.SPANJUDGE_EVAL_COST) == "double_value"
    assert "faithfulness 0.75 pass" in log.record.body.string_value


def test_a_whole_number_score_still_travels_as_a_double(sink: OtlpSink) -> None:
    log = _one_event(sink, _event_emitter(sink), make_record(score=1, label="pass"))
    assert log.kind(attrs.GEN_AI_EVALUATION_SCORE_VALUE) == "double_value"
    assert log.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0


def test_error_event_carries_error_type_and_never_a_score(sink: OtlpSink) -> None:
    record = make_record(
        status="error",
        score=None,
        label=None,
        success=None,
        reason=None,
        error_type="judge_timeout",
        error_message="judge did not answer in 30 s",
        verdicts=None,
    )
    log = _one_event(sink, _event_emitter(sink), record)
    assert log.record.event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT
    assert (log.record.trace_id.hex(), log.record.span_id.hex()) == (TRACE_ID, SPAN_ID)
    assert log.attributes == {
        attrs.GEN_AI_EVALUATION_NAME: "faithfulness",
        attrs.ERROR_TYPE: "judge_timeout",
        **PROVENANCE,
    }  # neither score value, label nor success: an error is never a 0 or a 1
    assert log.record.severity_text == "WARN"
    assert "judge did not answer" in log.record.body.string_value


def test_an_error_that_still_holds_a_score_does_not_send_it(sink: OtlpSink) -> None:
    """A record marked error keeps its stale score out of the event."""
    record = make_record(status="error", error_type="judge_server_error")  # score 0.75 left over
    log = _one_event(sink, _event_emitter(sink), record)
    assert attrs.GEN_AI_EVALUATION_SCORE_VALUE not in log.attributes
    assert attrs.GEN_AI_EVALUATION_SCORE_LABEL not in log.attributes
    assert attrs.SPANJUDGE_EVAL_SUCCESS not in log.attributes
    assert log.attributes[attrs.ERROR_TYPE] == "judge_server_error"


def test_skipped_event_carries_missing_field_and_the_skip_reason(sink: OtlpSink) -> None:
    record = make_record(
        status="skipped",
        score=None,
        label=None,
        success=None,
        reason=None,
        skip_reason="no retrieval_context in the trace",
        judge_model=None,
        input_tokens=0,
        output_tokens=0,
        cost=None,
        verdicts=None,
    )
    log = _one_event(sink, _event_emitter(sink), record)
    expected = {
        k: v
        for k, v in PROVENANCE.items()
        if k
        not in (
            attrs.SPANJUDGE_EVAL_JUDGE_MODEL,
            attrs.SPANJUDGE_EVAL_INPUT_TOKENS,
            attrs.SPANJUDGE_EVAL_OUTPUT_TOKENS,
            attrs.SPANJUDGE_EVAL_COST,
        )
    }
    assert log.attributes == {
        attrs.GEN_AI_EVALUATION_NAME: "faithfulness",
        attrs.ERROR_TYPE: "missing_field",
        attrs.SPANJUDGE_EVAL_SKIP_REASON: "no retrieval_context in the trace",
        **expected,
    }
    assert (log.record.trace_id.hex(), log.record.span_id.hex()) == (TRACE_ID, SPAN_ID)


def test_both_outputs_send_the_same_span_as_before_and_the_event(sink: OtlpSink) -> None:
    emitter = ScoreEmitter(
        span_exporter=OTLPSpanExporter(endpoint=sink.traces_url),
        log_exporter=OTLPLogExporter(endpoint=sink.logs_url),
    )
    assert emitter.outputs == ("span", "event")
    emitter.emit(make_record(), key=7)
    assert emitter.force_flush(10)
    [span] = sink.wait_for(lambda s: len(s) >= 1)
    [log] = sink.wait_for_logs(lambda logs: len(logs) >= 1)
    assert sorted(emitter.take_confirmed()) == [(7, "event"), (7, "span")]
    emitter.shutdown()
    # the evaluation span is unchanged by the event output: same ids, fields and span event
    assert span.trace_id == TRACE_ID and span.parent_span_id == SPAN_ID
    assert span.span_id == evaluation_span_id("faithfulness-llm", "llm", SPAN_ID)
    assert span.name == "evaluation faithfulness"
    assert span.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.75
    assert [name for name, _ in span.events] == [attrs.GEN_AI_EVALUATION_RESULT_EVENT]
    # the event hangs on the evaluated span, beside (not under) the evaluation span
    assert (log.trace_id, log.span_id) == (TRACE_ID, SPAN_ID)
    # the span alone has the verdicts and what LLM UIs read (its kind and its output summary)
    span_only = {attrs.SPANJUDGE_EVAL_VERDICTS, "openinference.span.kind", "output.value"}
    span_fields = {k: v for k, v in span.attributes.items() if k not in span_only}
    assert span.attributes["openinference.span.kind"] == "EVALUATOR"
    # the same fields in both forms; the event adds the span's id as its stable id
    assert log.attributes == {**span_fields, attrs.SPANJUDGE_EVAL_ID: span.span_id}


def test_event_output_alone_sends_no_span(sink: OtlpSink) -> None:
    emitter = _event_emitter(sink)
    emitter.emit(make_record(), key=1)
    assert emitter.force_flush(10)
    sink.wait_for_logs(lambda logs: len(logs) >= 1)
    emitter.shutdown()
    assert sink.requests == 0 and sink.spans == []
    assert emitter.exported == 0 and emitter.exported_events == 1


def test_span_output_alone_sends_no_event(sink: OtlpSink) -> None:
    emitter = ScoreEmitter(
        outputs=["span"],
        span_exporter=OTLPSpanExporter(endpoint=sink.traces_url),
        log_exporter=OTLPLogExporter(endpoint=sink.logs_url),
    )
    emitter.emit(make_record(), key=1)
    assert emitter.force_flush(10)
    sink.wait_for(lambda s: len(s) >= 1)
    assert emitter.take_confirmed() == [(1, "span")]
    emitter.shutdown()
    assert sink.log_requests == 0 and sink.logs == []


def _dropped(registry: CollectorRegistry, **labels: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("spanjudge_emitter_dropped_spans_total{") and all(
            f'{k}="{v}"' in line for k, v in labels.items()
        ):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no emitter drop series with {labels}")


def test_a_refusing_log_endpoint_confirms_only_the_span_and_counts_the_event_drop() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    telemetry.prime()  # every (output, reason) series starts at 0
    with OtlpSink(logs_status=503) as sink:
        emitter = ScoreEmitter(
            span_exporter=OTLPSpanExporter(endpoint=sink.traces_url),
            log_exporter=OTLPLogExporter(endpoint=sink.logs_url, timeout=1),
            telemetry=telemetry,
        )
        emitter.emit(make_record(), key=3)
        assert emitter.force_flush(15)
        sink.wait_for(lambda s: len(s) >= 1)
        assert sink.log_requests >= 1  # the event reached the endpoint, which refused it
        assert emitter.take_confirmed() == [(3, "span")]
        emitter.shutdown()
    assert emitter.dropped_by_output() == {"span": {}, "event": {DROP_EXPORT_FAILED: 1}}
    assert _dropped(registry, output="event", reason=DROP_EXPORT_FAILED) == 1.0
    assert _dropped(registry, output="span", reason=DROP_EXPORT_FAILED) == 0.0


def test_a_dead_logs_backend_does_not_hold_back_the_spans(sink: OtlpSink) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/v1/logs"
    emitter = ScoreEmitter(
        span_exporter=OTLPSpanExporter(endpoint=sink.traces_url),
        log_exporter=OTLPLogExporter(endpoint=dead, timeout=1),
    )
    records = [make_record(target_id=f"{i:016x}", span_id=f"{i + 1:016x}") for i in range(5)]
    for i, record in enumerate(records):
        emitter.emit(record, key=i)
    assert emitter.force_flush(10, outputs=["span"])
    assert len(sink.wait_for(lambda s: len(s) >= 5)) == 5
    assert emitter.force_flush(15)
    assert sorted(emitter.take_confirmed()) == [(i, "span") for i in range(5)]
    emitter.shutdown()
    event_drops = emitter.dropped_by_output()["event"]
    assert sum(event_drops.values()) == 5 and set(event_drops) == {DROP_EXPORT_FAILED}
    assert emitter.dropped_by_output()["span"] == {}
