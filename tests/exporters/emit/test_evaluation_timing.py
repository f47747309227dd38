"""Evaluation spans never change the duration of the trace they judge, and their status shows a
failing verdict by the status policy (issue 30 item 12, issue 39 item 2).

The judge runs seconds to hours after the app's turn ended; an evaluation span timed by the
judge, inside the app's trace, stretched the trace (and every latency percentile built from it)
by that much. The span is now an instant at the evaluated target's end, with the judge's own
timing as attributes."""

from __future__ import annotations

import pytest
from opentelemetry.trace.status import StatusCode

from spanjudge.exporters._emit.evaluation_result import evaluation_event, evaluation_span
from spanjudge.tracer import _attributes as attrs
from tests.exporters.emit.conftest import SPAN_ID, TRACE_ID, make_record

S = 1_000_000_000  # ns per second
# the app's turn: root agent span 0..2 s, its LLM call 0.5..1.5 s (ns since the epoch)
ROOT_ID = "a1b2c3d4e5f60718"
APP_START = 1_700_000_000 * S
APP_END = APP_START + 2 * S
LLM_END = APP_START + 3 * S // 2


def trace_window(*spans: tuple[int, int]) -> tuple[int, int]:
    return min(s for s, _ in spans), max(e for _, e in spans)


def test_the_span_is_an_instant_at_the_evaluated_spans_end_whenever_the_judge_ran() -> None:
    # the judge ran an hour later, for 40 s
    record = make_record(
        target_end_unix_nano=LLM_END, started_at=1_700_003_600.0, finished_at=1_700_003_640.0
    )
    span = evaluation_span(record)
    assert span.start_time == span.end_time == LLM_END
    assert span.parent is not None and span.parent.span_id == int(SPAN_ID, 16)
    assert span.context is not None and span.context.trace_id == int(TRACE_ID, 16)
    app = [(APP_START, APP_END), (APP_START + S // 2, LLM_END)]
    assert span.start_time is not None and span.end_time is not None
    assert trace_window(*app, (span.start_time, span.end_time)) == trace_window(*app)
    # the judge's clock, kept where nothing computes a latency from it
    assert span.attributes is not None
    assert span.attributes[attrs.SPANJUDGE_EVAL_JUDGED_AT] == 1_700_003_640.0
    assert span.attributes[attrs.SPANJUDGE_EVAL_DURATION] == 40.0
    # the span event is at the span's own time, the log event at the judge's
    assert [e.timestamp for e in span.events] == [LLM_END]
    assert evaluation_event(record).log_record.timestamp == 1_700_003_640 * S


def test_a_trace_evaluation_ends_with_the_trace_under_its_root() -> None:
    # a trace target's end is the last end of any span in the trace (runner: Target.end)
    record = make_record(
        rule="bias-trace",
        target_type="trace",
        target_id=TRACE_ID,
        span_id=ROOT_ID,
        target_end_unix_nano=APP_END,
    )
    span = evaluation_span(record)
    assert span.parent is not None and span.parent.span_id == int(ROOT_ID, 16)
    assert span.start_time == span.end_time == APP_END


def test_without_the_targets_end_the_span_is_linked_from_a_trace_of_its_own() -> None:
    """A result whose target was gone from the store knows no window in the judged trace: it
    goes to a trace of its own (the same one when re-emitted), linked to the evaluated span."""
    record = make_record(target_end_unix_nano=None, status="skipped", score=None, label=None)
    span = evaluation_span(record)
    assert span.parent is None
    assert span.context is not None and span.context.trace_id != int(TRACE_ID, 16)
    assert evaluation_span(record).context.trace_id == span.context.trace_id  # type: ignore[union-attr]
    [link] = span.links
    assert (link.context.trace_id, link.context.span_id) == (int(TRACE_ID, 16), int(SPAN_ID, 16))
    assert (span.start_time, span.end_time) == (1_700_000_010 * S, 1_700_000_012_500_000_000)
    # the event still hangs on the evaluated span
    log = evaluation_event(record).log_record
    assert (log.trace_id, log.span_id) == (int(TRACE_ID, 16), int(SPAN_ID, 16))


def test_a_failing_verdict_leaves_the_status_unset_by_default() -> None:
    # the default policy: a low score is a finding about the answer, not an error of the app,
    # so error rates and error charts (Phoenix's, Jaeger's error=true) count the app's errors
    record = make_record(
        score=0.25, label="fail", success=False, reason="2 of 3 claims unsupported"
    )
    assert evaluation_span(record).status.status_code is StatusCode.UNSET
    assert evaluation_span(record, status="unset").status.status_code is StatusCode.UNSET


def test_the_failing_policy_makes_a_failing_verdict_an_error_with_the_reason() -> None:
    record = make_record(
        score=0.25, label="fail", success=False, reason="2 of 3 claims unsupported"
    )
    status = evaluation_span(record, status="failing").status
    assert status.status_code is StatusCode.ERROR
    assert status.description == "faithfulness 0.25 fail: 2 of 3 claims unsupported"


def test_a_judge_error_is_an_error_status_with_its_message_unless_unset() -> None:
    record = make_record(
        status="error", score=None, label=None, success=None, reason=None,
        error_type="judge_timeout", error_message="the judge did not answer in 60 s",
    )  # fmt: skip
    for policy in ("judge-errors", "failing"):
        status = evaluation_span(record, status=policy).status  # type: ignore[arg-type]
        assert status.status_code is StatusCode.ERROR
        assert status.description == "the judge did not answer in 60 s"
    assert evaluation_span(record).status.status_code is StatusCode.ERROR  # the default
    assert evaluation_span(record, status="unset").status.status_code is StatusCode.UNSET
    # the reason is still on the span for every policy
    assert evaluation_span(record, status="unset").attributes["error.type"] == "judge_timeout"


def test_an_unknown_status_policy_is_a_config_error() -> None:
    from spanjudge.errors import ConfigError
    from spanjudge.exporters._emit.emitter import ScoreEmitter

    with pytest.raises(ConfigError, match="evaluation_status must be one of judge-errors"):
        ScoreEmitter(outputs=["span"], span_exporter=object(), evaluation_status="red")  # type: ignore[arg-type]


def test_a_pass_and_a_skip_leave_the_status_unset() -> None:
    passed = evaluation_span(make_record())
    skipped = evaluation_span(
        make_record(status="skipped", score=None, label=None, success=None, skip_reason="no docs")
    )
    assert passed.status.status_code is StatusCode.UNSET
    assert skipped.status.status_code is StatusCode.UNSET


def test_a_stored_record_with_only_success_false_still_shows_as_failing() -> None:
    record = make_record(score=0.1, label=None, success=False, reason="off topic")
    assert evaluation_span(record, status="failing").status.status_code is StatusCode.ERROR
