"""An :class:`~spanjudge._core.span_record.EvaluationRecord` in each of its OpenTelemetry forms.

One reading of a record (:func:`result_fields`: what the GenAI semantic conventions call an
evaluation result) feeds every form, so they cannot disagree:

* the **evaluation span** (:func:`evaluation_span`): child of the evaluated span, named
  ``evaluation {metric}``, with the semconv fields, the project's provenance
  (``spanjudge.evaluation.*``), a ``gen_ai.evaluation.result`` span event, and the span kind
  LLM UIs render (``openinference.span.kind = EVALUATOR``: Phoenix shows it as an evaluator
  span, MLflow's OTLP ingest maps it to its ``EVALUATOR`` span type) with the one-line summary
  as ``output.value`` (the output both show first). Its status follows a policy
  (:data:`EVALUATION_STATUSES`): by default only an evaluation that could not score is ERROR,
  so a failing verdict never counts as an error of the app. It is an instant
  at the evaluated target's end, inside the judged trace's time window, so it never stretches
  the trace (its duration, its latency percentiles); when the judge ran is in
  ``spanjudge.evaluation.judged_at`` and ``.duration`` (docs/scores.md says why);
* the **evaluation event** (:func:`evaluation_event`): the semconv ``gen_ai.evaluation.result``
  log record, carrying the evaluated span's trace id and span id (open-telemetry/
  semantic-conventions-genai, ``model/gen-ai/events.yaml``: "SHOULD be parented to the GenAI
  operation span being evaluated ... or set ``gen_ai.response.id``");
* the **enrich-mode score attributes** (:func:`score_attributes`) the evaluated span carries
  itself, one key set per metric (``spanjudge.score.<metric>.value|label|success|reason|
  error_type``) so a user filters spans by score (TraceQL
  ``{ span.spanjudge.score.faithfulness.value < 0.5 }``).

An evaluation that produced no score (judge error, skipped case) never carries a score value or
label: it carries ``error.type``. Every function here is pure: no I/O, no global state.

Example::

    attributes = span_attributes(record)
    log_record = evaluation_event(record, resource)
    assert log_record.log_record.span_id == int(record.span_id, 16)
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Iterable
from typing import Any, Final, Literal, get_args

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.status import Status, StatusCode

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge.errors import ConfigError, MissingFieldError
from spanjudge.tracer import _attributes as attrs

DEFAULT_SERVICE_NAME = "spanjudge"
# ``error.type`` of a result that was skipped because its case lacked a field
MISSING_FIELD: Final = MissingFieldError.error_type
# Verdict JSON is bounded so one chatty judge cannot blow the backend's attribute limits.
MAX_VERDICTS_CHARS = 8192
# Reasons ride on the user's span in enrich mode, which backends limit in size.
MAX_REASON_CHARS = 2048
SCORE_PREFIX = "spanjudge.score."
# The span kind attribute of OpenInference, read by Phoenix and by MLflow's OTLP ingest.
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
EVALUATOR_KIND = "EVALUATOR"
OUTPUT_VALUE = "output.value"
# The worker's service.name when the evaluation span carries the judged span's (``judged``).
EMITTED_BY = "spanjudge.evaluation.emitted_by"

# Which evaluation spans get status ERROR:
# * ``judge-errors`` (default): an evaluation that could not score (judge error, timeout); a
#   failing verdict stays UNSET, so error rates and error charts count the app's errors only;
# * ``unset``: none (an outage of the judge does not show in error charts either);
# * ``failing``: also every failing verdict (its status message the one-line summary).
EvaluationStatus = Literal["judge-errors", "unset", "failing"]
EVALUATION_STATUSES: Final[tuple[EvaluationStatus, ...]] = get_args(EvaluationStatus)
DEFAULT_EVALUATION_STATUS: Final[EvaluationStatus] = "judge-errors"

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _error_type(record: EvaluationRecord) -> str:
    # semconv's fallback value is "_OTHER"; a skip is a case that lacked a field
    return record.error_type or (MISSING_FIELD if record.status == "skipped" else "_OTHER")


def result_fields(record: EvaluationRecord) -> dict[str, Any]:
    """The semconv ``gen_ai.evaluation.*`` fields, ``error.type`` and ``gen_ai.response.id``.

    Score value and label appear only for ``status == "scored"``: an error is never a 0 or 1.
    """
    fields: dict[str, Any] = {attrs.GEN_AI_EVALUATION_NAME: record.metric}
    if record.status == "scored":
        if record.score is not None:
            fields[attrs.GEN_AI_EVALUATION_SCORE_VALUE] = float(record.score)
        if record.label:
            fields[attrs.GEN_AI_EVALUATION_SCORE_LABEL] = record.label
    else:
        fields[attrs.ERROR_TYPE] = _error_type(record)
    if record.reason:
        fields[attrs.GEN_AI_EVALUATION_EXPLANATION] = record.reason
    if record.response_id:
        fields[attrs.GEN_AI_RESPONSE_ID] = record.response_id
    return fields


def _verdicts_json(verdicts: list[dict[str, Any]]) -> str:
    text = json.dumps(verdicts, ensure_ascii=False, default=str)
    if len(text) > MAX_VERDICTS_CHARS:
        dropped = len(text) - MAX_VERDICTS_CHARS
        text = text[:MAX_VERDICTS_CHARS] + attrs.TRUNCATION_MARKER.format(dropped=dropped)
    return text


def provenance(record: EvaluationRecord, *, verdicts: bool = True) -> dict[str, Any]:
    """The project's ``spanjudge.evaluation.*`` fields: rule, target, threshold, judge, cost,
    the judge's timing..."""
    out: dict[str, Any] = {
        attrs.SPANJUDGE_EVAL_RULE: record.rule,
        attrs.SPANJUDGE_EVAL_TARGET: record.target_type,
        attrs.SPANJUDGE_EVAL_TARGET_ID: record.target_id,
        attrs.SPANJUDGE_EVAL_STRICT_MODE: bool(record.strict_mode),
    }
    if record.threshold is not None:
        out[attrs.SPANJUDGE_EVAL_THRESHOLD] = float(record.threshold)
    if record.status == "scored" and record.success is not None:
        out[attrs.SPANJUDGE_EVAL_SUCCESS] = bool(record.success)
    if record.judge_model:
        out[attrs.SPANJUDGE_EVAL_JUDGE_MODEL] = record.judge_model
    if record.input_tokens or record.output_tokens:
        out[attrs.SPANJUDGE_EVAL_INPUT_TOKENS] = int(record.input_tokens)
        out[attrs.SPANJUDGE_EVAL_OUTPUT_TOKENS] = int(record.output_tokens)
    if record.cost is not None:
        out[attrs.SPANJUDGE_EVAL_COST] = float(record.cost)
    if verdicts and record.verdicts:
        out[attrs.SPANJUDGE_EVAL_VERDICTS] = _verdicts_json(record.verdicts)
    if record.sample_rate is not None:
        out[attrs.SPANJUDGE_EVAL_SAMPLE_RATE] = float(record.sample_rate)
    if record.status == "skipped" and record.skip_reason:
        out[attrs.SPANJUDGE_EVAL_SKIP_REASON] = record.skip_reason
    if record.context_source:
        out[attrs.SPANJUDGE_EVAL_CONTEXT_SOURCE] = record.context_source
    if record.cached:
        out[attrs.SPANJUDGE_EVAL_CACHED] = True
    out.update(judge_timing(record))
    return out


def judge_timing(record: EvaluationRecord) -> dict[str, Any]:
    """When the judge produced the result (Unix seconds) and how long the evaluation took
    (seconds): the evaluation span's own start and end are the evaluated target's, not these."""
    out: dict[str, Any] = {}
    if record.finished_at is not None:
        out[attrs.SPANJUDGE_EVAL_JUDGED_AT] = float(record.finished_at)
        if record.started_at is not None:
            duration = max(record.finished_at - record.started_at, 0.0)
            out[attrs.SPANJUDGE_EVAL_DURATION] = float(duration)
    return out


def span_attributes(record: EvaluationRecord) -> dict[str, Any]:
    """All attributes of the evaluation span: semconv fields, provenance, then the span kind
    and the one-line summary LLM UIs show."""
    return {
        **result_fields(record),
        **provenance(record),
        OPENINFERENCE_SPAN_KIND: EVALUATOR_KIND,
        OUTPUT_VALUE: event_body(record)[:MAX_REASON_CHARS],
    }


def event_attributes(record: EvaluationRecord) -> dict[str, Any]:
    """Attributes of the ``gen_ai.evaluation.result`` log record: semconv fields, then the
    provenance without the verdict list (an event stays small; the span keeps the verdicts),
    and the result's stable id (``spanjudge.evaluation.id``, the evaluation span's id): a log
    record has no id a backend could de-duplicate by, so an event re-sent after a crash is
    recognised by this one."""
    return {
        **result_fields(record),
        **provenance(record, verdicts=False),
        attrs.SPANJUDGE_EVAL_ID: record.evaluation_span_id,
    }


# ---------------------------------------------------------------------- SDK objects
@functools.cache
def default_resource() -> Resource:
    # Resource.create runs the resource detectors (milliseconds): do it once per process.
    return Resource.create({SERVICE_NAME: DEFAULT_SERVICE_NAME})


def _ns(seconds: float | None) -> int | None:
    return int(seconds * 1e9) if seconds is not None else None


def _judge_times(record: EvaluationRecord) -> tuple[int, int]:
    """When the judge ran, in ns: the log event's time, and a linked span's window."""
    now = time.time()
    start = _ns(record.started_at if record.started_at is not None else record.finished_at or now)
    end = _ns(record.finished_at)
    assert start is not None
    return start, max(end if end is not None else start, start)


def _linked_trace_id(record: EvaluationRecord) -> int:
    """A trace of the evaluation span's own, derived from the result so a re-emitted result
    lands in the same one; never all zeros."""
    seed = f"spanjudge.evaluation\x1f{record.trace_id}\x1f{record.evaluation_span_id}"
    digest = hashlib.sha256(seed.encode()).hexdigest()
    return int(digest[:32], 16) or int(digest[32:], 16)


def check_evaluation_status(policy: str) -> EvaluationStatus:
    if policy not in EVALUATION_STATUSES:
        raise ConfigError(
            f"evaluation_status must be one of {', '.join(EVALUATION_STATUSES)}, got {policy!r}"
        )
    return policy


def _status(record: EvaluationRecord, policy: EvaluationStatus) -> Status:
    """By ``policy`` (:data:`EVALUATION_STATUSES`): ERROR for a judge error (its message)
    unless ``unset``, and for a failing verdict (the one-line summary with the judge's reason)
    only with ``failing``; a pass or a skip stays UNSET."""
    if record.status == "error" and policy != "unset":
        return Status(StatusCode.ERROR, record.error_message or record.error_type or None)
    failed = record.label == "fail" or (record.label is None and record.success is False)
    if record.status == "scored" and failed and policy == "failing":
        return Status(StatusCode.ERROR, event_body(record)[:MAX_REASON_CHARS])
    return Status(StatusCode.UNSET)


def _trace_id(record: EvaluationRecord) -> int:
    if not record.trace_id:
        raise ConfigError("evaluation record without a trace id")
    trace_id = int(record.trace_id, 16)
    if not trace_id:
        raise ConfigError("evaluation record with an all-zero trace id")
    return trace_id


# the attribute of the evaluation span's link to the judge's own trace
LINK_TO = "spanjudge.link"
JUDGE_LINK = "judge"


def judge_link(record: EvaluationRecord) -> Link | None:
    """The link to the root of the judge's own trace (judge tracing on), else None."""
    if not record.judge_trace_id or not record.judge_span_id:
        return None
    try:
        context = SpanContext(
            int(record.judge_trace_id, 16), int(record.judge_span_id, 16), True, _SAMPLED
        )
    except ValueError:
        return None
    return Link(context, {LINK_TO: JUDGE_LINK})


def evaluation_trace_id(record: EvaluationRecord) -> int:
    """The trace the evaluation span goes into: the judged one, or its own when the record
    does not know the target's end (see :func:`evaluation_span`)."""
    return _trace_id(record) if record.target_end_unix_nano else _linked_trace_id(record)


def evaluation_span(
    record: EvaluationRecord,
    resource: Resource | None = None,
    *,
    status: EvaluationStatus = DEFAULT_EVALUATION_STATUS,
    emitted_by: str | None = None,
) -> ReadableSpan:
    """The evaluation span of ``record``; its id is derived from (rule, target), so a re-emitted
    result is the same span. Raises ``ValueError`` when the record has no (valid) trace id.
    ``status``: which verdicts make it an ERROR span (:data:`EVALUATION_STATUSES`);
    ``emitted_by``: the worker's service.name when ``resource`` is the judged span's (an
    attribute of the span, not of its resource: MLflow makes resource attributes trace tags).

    It is a child of the evaluated span, starting and ending at the evaluated target's end
    (``target_end_unix_nano``: the span's end; a trace's or a conversation's last end), so the
    judged trace keeps its duration. A record that does not know that end (its target was gone
    from the store) gets a trace of its own, timed by the judge, with a link to the evaluated
    span: placed by the judge's clock in the judged trace, it would stretch it.

    Example::

        span = evaluation_span(record)
        assert span.start_time == span.end_time == record.target_end_unix_nano
    """
    trace_id = _trace_id(record)
    evaluated = (
        SpanContext(trace_id, int(record.span_id, 16), True, _SAMPLED) if record.span_id else None
    )
    links: list[Link] = []
    if record.target_end_unix_nano:
        start = end = int(record.target_end_unix_nano)
        parent = evaluated
    else:
        start, end = _judge_times(record)
        parent = None
        links = [Link(evaluated)] if evaluated is not None else []
        trace_id = _linked_trace_id(record)
    judge = judge_link(record)
    if judge is not None:
        links = [*links, judge]
    context = SpanContext(trace_id, int(record.evaluation_span_id, 16), False, _SAMPLED)
    return ReadableSpan(
        name=f"evaluation {record.metric}",
        context=context,
        parent=parent,
        resource=resource or default_resource(),
        attributes={**span_attributes(record), **({EMITTED_BY: emitted_by} if emitted_by else {})},
        events=[Event(attrs.GEN_AI_EVALUATION_RESULT_EVENT, result_fields(record), timestamp=end)],
        links=links,
        kind=SpanKind.INTERNAL,
        status=_status(record, status),
        start_time=start,
        end_time=end,
        instrumentation_scope=InstrumentationScope(attrs.TRACER_NAME),
    )


def event_body(record: EvaluationRecord) -> str:
    """A one-line summary for log backends that show a body (Loki, Grafana's logs panel)."""
    if record.status == "scored" and record.score is not None:
        head = f"{record.metric} {record.score:.2f} {record.label or ''}".rstrip()
    else:
        head = f"{record.metric} {record.status}: {_error_type(record)}"
    detail = record.reason or record.skip_reason or record.error_message
    return f"{head}: {detail}" if detail else head


def evaluation_event(
    record: EvaluationRecord, resource: Resource | None = None
) -> ReadableLogRecord:
    """The ``gen_ai.evaluation.result`` log record of ``record``, parented to the evaluated span
    (its trace id and span id). Raises ``ValueError`` when the record has no (valid) trace id."""
    trace_id = _trace_id(record)
    _, end = _judge_times(record)  # the event says when the judge gave its verdict
    failed = record.status == "error"
    # the evaluated span's ids ride in the record's context (the non-deprecated way to set them)
    parent = NonRecordingSpan(
        SpanContext(trace_id, int(record.span_id, 16) if record.span_id else 0, True, _SAMPLED)
    )
    log_record = LogRecord(
        timestamp=end,
        observed_timestamp=time.time_ns(),
        context=set_span_in_context(parent),
        severity_number=SeverityNumber.WARN if failed else SeverityNumber.INFO,
        severity_text="WARN" if failed else "INFO",
        body=event_body(record),
        attributes=event_attributes(record),
        event_name=attrs.GEN_AI_EVALUATION_RESULT_EVENT,
    )
    return ReadableLogRecord(
        log_record,
        resource=resource or default_resource(),
        instrumentation_scope=InstrumentationScope(attrs.TRACER_NAME),
    )


def feedback_event(
    feedback: FeedbackRecord, span_id: str | None, resource: Resource | None = None
) -> ReadableLogRecord:
    """A person's label as a ``spanjudge.feedback`` log record on ``span_id`` of the label's
    trace, with the same ``gen_ai.evaluation.*`` fields a result has (the note is the
    explanation). Raises ``ValueError`` when the label has no (valid) trace id."""
    if not feedback.trace_id or not int(feedback.trace_id, 16):
        raise ConfigError("feedback without a trace id")
    fields: dict[str, Any] = {
        attrs.GEN_AI_EVALUATION_NAME: feedback.metric,
        attrs.GEN_AI_EVALUATION_SCORE_LABEL: feedback.label,
        attrs.SPANJUDGE_FEEDBACK_ID: feedback.feedback_id,
        attrs.SPANJUDGE_FEEDBACK_SOURCE: feedback.source,
    }
    for key, value in (
        (attrs.GEN_AI_EVALUATION_SCORE_VALUE, feedback.score),
        (attrs.GEN_AI_EVALUATION_EXPLANATION, feedback.note),
        (attrs.SPANJUDGE_FEEDBACK_ANNOTATOR, feedback.annotator),
        (attrs.SPANJUDGE_EVAL_RULE, feedback.rule),
        (attrs.GEN_AI_CONVERSATION_ID, feedback.conversation_id),
    ):
        if value is not None:
            fields[key] = value
    context = SpanContext(
        int(feedback.trace_id, 16), int(span_id, 16) if span_id else 0, True, _SAMPLED
    )
    by = f" by {feedback.annotator}" if feedback.annotator else ""
    body = f"human feedback{by}: {feedback.metric} {feedback.label}"
    log_record = LogRecord(
        timestamp=_ns(feedback.created_at),
        observed_timestamp=time.time_ns(),
        context=set_span_in_context(NonRecordingSpan(context)),
        severity_number=SeverityNumber.INFO,
        severity_text="INFO",
        body=f"{body}: {feedback.note}" if feedback.note else body,
        attributes=fields,
        event_name=attrs.SPANJUDGE_FEEDBACK_EVENT,
    )
    return ReadableLogRecord(
        log_record,
        resource=resource or default_resource(),
        instrumentation_scope=InstrumentationScope(attrs.TRACER_NAME),
    )


# ---------------------------------------------------------------------- enrich mode
def score_key(metric: str, field: str) -> str:
    """``spanjudge.score.<metric>.<field>`` with the metric name normalised (lower, ``_``)."""
    name = "_".join(metric.strip().lower().split()) or "metric"
    return f"{SCORE_PREFIX}{name}.{field}"


def score_attributes(records: Iterable[EvaluationRecord]) -> dict[str, Any]:
    """The enrich-mode attributes of one span from its evaluation records.

    When two records share a metric (two rules), the scored one wins over an error, and among
    equals the later one in ``records`` wins, so the result is deterministic.
    """
    chosen: dict[str, EvaluationRecord] = {}
    for record in records:
        previous = chosen.get(record.metric)
        if previous is None or record.status == "scored" or previous.status != "scored":
            chosen[record.metric] = record
    out: dict[str, Any] = {}
    for metric, record in chosen.items():
        fields = result_fields(record)
        if attrs.GEN_AI_EVALUATION_SCORE_VALUE in fields:
            out[score_key(metric, "value")] = fields[attrs.GEN_AI_EVALUATION_SCORE_VALUE]
        if attrs.GEN_AI_EVALUATION_SCORE_LABEL in fields:
            out[score_key(metric, "label")] = fields[attrs.GEN_AI_EVALUATION_SCORE_LABEL]
        if record.status == "scored" and record.success is not None:
            out[score_key(metric, "success")] = bool(record.success)
        if attrs.ERROR_TYPE in fields:
            out[score_key(metric, "error_type")] = fields[attrs.ERROR_TYPE]
        if record.reason:
            out[score_key(metric, "reason")] = record.reason[:MAX_REASON_CHARS]
    return out
