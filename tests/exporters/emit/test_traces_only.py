"""A logs endpoint that takes no logs (a traces-only backend: Jaeger, Tempo, Phoenix) is told
apart from a failing one (issue 30 item 10): one WARNING naming the fixes, a counter, and the
events settled (confirmed unsent) so that nothing stays owed to it."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from spanjudge._core.span_record import FeedbackRecord
from spanjudge._core.telemetry import Telemetry, prometheus_meter_provider
from spanjudge.exporters._emit.emitter import DROP_EXPORT_FAILED, ScoreEmitter
from tests.exporters.emit.conftest import TRACE_ID, make_record
from tests.support.otlp_sink import OtlpSink

COUNTER = "spanjudge_emitter_events_not_accepted_total"


def _emitter(sink: OtlpSink, **kwargs: object) -> ScoreEmitter:
    return ScoreEmitter(
        span_exporter=OTLPSpanExporter(endpoint=sink.traces_url),
        log_exporter=OTLPLogExporter(endpoint=sink.logs_url),
        **kwargs,  # type: ignore[arg-type]
    )


def _emit(emitter: ScoreEmitter, keys: range) -> None:
    for key in keys:
        emitter.emit(make_record(rule=f"rule-{key}"), key=key)
    assert emitter.force_flush(10)


def _counter(registry: CollectorRegistry) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(COUNTER):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {COUNTER}")


@pytest.mark.parametrize("code", [404, 405, 501])
def test_events_refused_as_not_taken_are_settled_after_one_warning(
    code: int, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    telemetry.prime()
    caplog.set_level(logging.INFO)
    with OtlpSink(traces_only=True, logs_status=code) as sink:
        emitter = _emitter(sink, telemetry=telemetry)
        _emit(emitter, range(3))
        _emit(emitter, range(3, 6))  # later batches are not sent at all
        spans = sink.wait_for(lambda s: len(s) == 6)
        emitter.shutdown()
    assert len(spans) == 6  # the spans landed
    # every event confirmed (settled), so the caller stops owing it; none counted dropped
    confirmed = emitter.take_confirmed()
    assert sorted(k for k, o in confirmed if o == "event") == list(range(6))
    assert sorted(k for k, o in confirmed if o == "span") == list(range(6))
    assert emitter.dropped_total == 0
    assert emitter.events_not_accepted == 6 and emitter.exported_events == 0
    assert emitter.logs_refused_with == code
    assert sink.refused_log_requests == 1
    assert _counter(registry) == 6
    # one WARNING naming the fixes; the OTLP exporter's own opaque ERROR is not logged
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert warnings[0].name == "spanjudge.emitter"
    assert sink.logs_url in message and f"HTTP {code}" in message
    assert 'outputs = ["span"]' in message and "Collector" in message and "Loki" in message
    assert COUNTER in message


def test_a_failing_logs_endpoint_is_not_mistaken_for_a_traces_only_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with OtlpSink(logs_status=500) as sink:  # takes logs, but fails: the events stay owed
        emitter = _emitter(sink)
        _emit(emitter, range(2))
        sink.wait_for(lambda s: len(s) == 2)
        emitter.shutdown()
    assert [k for k, o in emitter.take_confirmed() if o == "event"] == []
    assert emitter.dropped_by_output()["event"] == {DROP_EXPORT_FAILED: 2}
    assert emitter.events_not_accepted == 0 and emitter.logs_refused_with is None
    assert not [r for r in caplog.records if "does not take OTLP logs" in r.getMessage()]


def test_an_endpoint_that_starts_taking_logs_gets_the_events_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="spanjudge.emitter")
    with OtlpSink(traces_only=True) as sink:
        # re-checked on every batch here; ten minutes by default
        emitter = _emitter(sink, logs_recheck_seconds=0)
        _emit(emitter, range(1))
        assert emitter.logs_refused_with == 404
        sink.traces_only = False  # a Collector was put in front
        _emit(emitter, range(1, 3))
        logs = sink.wait_for_logs(lambda got: len(got) == 2)
        emitter.shutdown()
    assert sorted(log.attributes["spanjudge.evaluation.rule"] for log in logs) == [
        "rule-1",
        "rule-2",
    ]
    assert emitter.exported_events == 2 and emitter.events_not_accepted == 1
    assert emitter.logs_refused_with is None
    assert any(
        "takes gen_ai.evaluation.result events again" in r.getMessage() for r in caplog.records
    )


def test_label_events_settle_too() -> None:
    feedback = FeedbackRecord(
        feedback_id=7, trace_id=TRACE_ID, metric="faithfulness", label="fail", created_at=1.0
    )
    with OtlpSink(traces_only=True) as sink:
        emitter = _emitter(sink)
        assert emitter.emit_feedback(feedback, None)
        assert emitter.force_flush(10)
        emitter.shutdown()
    assert emitter.take_confirmed_feedback() == [(7, "event")]
    assert emitter.events_not_accepted == 1
