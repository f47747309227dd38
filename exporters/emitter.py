"""The score emitter: turns an :class:`EvaluationRecord` into an evaluation span in the evaluated
trace and ships it over OTLP, without ever blocking or failing the caller.

The evaluation span follows the design's score model: child of the evaluated span, named
``evaluation {metric}``, with a span id derived from (rule, target) so a re-emitted result is the
same span, the semconv ``gen_ai.evaluation.*`` attributes plus the project's
``spanjudge.evaluation.*`` ones, and a ``gen_ai.evaluation.result`` event with the same fields.

Example::

    emitter = ScoreEmitter()  # OTLPSpanExporter configured from OTEL_* env
    emitter.emit(record)      # returns at once
    emitter.force_flush()
    emitter.shutdown()
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from spanjudge.exporters.records import EvaluationRecord
from spanjudge.tracer import attributes as attrs

if TYPE_CHECKING:
    from spanjudge.exporters.telemetry import Telemetry

logger = logging.getLogger("spanjudge.emitter")

DEFAULT_SERVICE_NAME = "spanjudge"
# Verdict JSON is bounded so one chatty judge cannot blow the backend's attribute limits.
MAX_VERDICTS_CHARS = 8192
MISSING_FIELD = "missing_field"

# Drop reasons (the ``reason`` label of the emitter's dropped counter).
DROP_QUEUE_FULL = "queue_full"
DROP_INVALID = "invalid_record"
DROP_EXPORT_FAILED = "export_failed"
DROP_SHUTDOWN = "shutdown"
DROP_REASONS: tuple[str, ...] = (DROP_QUEUE_FULL, DROP_INVALID, DROP_EXPORT_FAILED, DROP_SHUTDOWN)

_BATCH = 512
_FLUSH_INTERVAL = 0.5


def _ns(seconds: float | None) -> int | None:
    return int(seconds * 1e9) if seconds is not None else None


def _verdicts_json(verdicts: list[dict[str, Any]]) -> str:
    text = json.dumps(verdicts, ensure_ascii=False, default=str)
    if len(text) > MAX_VERDICTS_CHARS:
        dropped = len(text) - MAX_VERDICTS_CHARS
        text = text[:MAX_VERDICTS_CHARS] + attrs.TRUNCATION_MARKER.format(dropped=dropped)
    return text


def evaluation_fields(record: EvaluationRecord) -> dict[str, Any]:
    """The semconv ``gen_ai.evaluation.*`` fields (+ ``error.type``) shared by span and event.

    Score value and label appear only for ``status == "scored"``: an error is never a 0 or 1.
    """
    fields: dict[str, Any] = {attrs.GEN_AI_EVALUATION_NAME: record.metric}
    if record.status == "scored":
        if record.score is not None:
            fields[attrs.GEN_AI_EVALUATION_SCORE_VALUE] = float(record.score)
        if record.label:
            fields[attrs.GEN_AI_EVALUATION_SCORE_LABEL] = record.label
    else:
        # semconv's fallback value is "_OTHER"; a skip is a case that lacked a field.
        fallback = MISSING_FIELD if record.status == "skipped" else "_OTHER"
        fields[attrs.ERROR_TYPE] = record.error_type or fallback
    if record.reason:
        fields[attrs.GEN_AI_EVALUATION_EXPLANATION] = record.reason
    return fields


def evaluation_attributes(record: EvaluationRecord) -> dict[str, Any]:
    """All attributes of the evaluation span (semconv fields + ``spanjudge.evaluation.*``)."""
    out = evaluation_fields(record)
    out[attrs.SPANJUDGE_EVAL_RULE] = record.rule
    out[attrs.SPANJUDGE_EVAL_TARGET] = record.target_type
    out[attrs.SPANJUDGE_EVAL_TARGET_ID] = record.target_id
    out[attrs.SPANJUDGE_EVAL_STRICT_MODE] = bool(record.strict_mode)
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
    if record.verdicts:
        out[attrs.SPANJUDGE_EVAL_VERDICTS] = _verdicts_json(record.verdicts)
    if record.sample_rate is not None:
        out[attrs.SPANJUDGE_EVAL_SAMPLE_RATE] = float(record.sample_rate)
    if record.status == "skipped" and record.skip_reason:
        out[attrs.SPANJUDGE_EVAL_SKIP_REASON] = record.skip_reason
    return out


@functools.cache
def _default_resource() -> Resource:
    # Resource.create runs the resource detectors (milliseconds): do it once per process.
    return Resource.create({SERVICE_NAME: DEFAULT_SERVICE_NAME})


def evaluation_span(record: EvaluationRecord, resource: Resource | None = None) -> ReadableSpan:
    """Build the evaluation span of ``record`` (pure: no I/O, no global state).

    Raises ``ValueError`` when the record has no (valid) trace id.

    Example::

        span = evaluation_span(record, Resource.create({"service.name": "spanjudge"}))
        assert span.context.span_id == int(record.evaluation_span_id, 16)
    """
    if not record.trace_id:
        raise ValueError("evaluation record without a trace id")
    trace_id = int(record.trace_id, 16)
    if not trace_id:
        raise ValueError("evaluation record with an all-zero trace id")
    flags = TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(trace_id, int(record.evaluation_span_id, 16), False, flags)
    parent = SpanContext(trace_id, int(record.span_id, 16), True, flags) if record.span_id else None
    now = time.time()
    start = _ns(record.started_at if record.started_at is not None else record.finished_at or now)
    end = _ns(record.finished_at) if record.finished_at is not None else start
    assert start is not None and end is not None
    end = max(end, start)
    fields = evaluation_fields(record)
    status = (
        Status(StatusCode.ERROR, record.error_message or record.error_type or None)
        if record.status == "error"
        else Status(StatusCode.UNSET)
    )
    return ReadableSpan(
        name=f"evaluation {record.metric}",
        context=context,
        parent=parent,
        resource=resource or _default_resource(),
        attributes=evaluation_attributes(record),
        events=[Event(attrs.GEN_AI_EVALUATION_RESULT_EVENT, fields, timestamp=end)],
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=start,
        end_time=end,
        instrumentation_scope=InstrumentationScope(attrs.TRACER_NAME),
    )


class ScoreEmitter:
    """Exports evaluation spans from a background thread through a bounded queue.

    ``emit()`` never blocks on I/O and never raises; when the queue holds ``max_queue`` spans,
    new ones are dropped and counted (``dropped`` by reason, and the telemetry counter if given).
    The emitter counts only its own drops; the evaluation loop records the evaluation metrics
    (``Telemetry.record_evaluation``) once per result, so a re-emitted span is not counted twice.

    Example::

        emitter = ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=url))
        emitter.emit(record)
        assert emitter.force_flush(5)
    """

    def __init__(
        self,
        *,
        span_exporter: SpanExporter | None = None,
        resource: Resource | None = None,
        telemetry: Telemetry | None = None,
        max_queue: int = 2048,
    ) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be positive")
        if span_exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter = OTLPSpanExporter()
        self.span_exporter = span_exporter
        self.resource = resource or _default_resource()
        self.telemetry = telemetry
        self.max_queue = max_queue
        self._queue: deque[tuple[ReadableSpan, Any]] = deque()
        self._confirmed: list[Any] = []
        self._cond = threading.Condition(threading.Lock())
        self._in_flight = 0
        self._flush_requested = False
        self._shutdown = False
        self._exported = 0
        self._dropped: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, name="spanjudge-emitter", daemon=True)
        self._thread.start()

    @property
    def exported(self) -> int:
        """Evaluation spans the exporter accepted."""
        return self._exported

    @property
    def dropped(self) -> dict[str, int]:
        """Dropped evaluation spans by reason (copy)."""
        with self._cond:
            return dict(self._dropped)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def _drop(self, reason: str, count: int = 1) -> None:
        # Called with or without the lock held by callers; keep it lock-free on telemetry.
        self._dropped[reason] = self._dropped.get(reason, 0) + count
        if self.telemetry is not None:
            try:
                self.telemetry.record_emitter_dropped(reason, count)
            except Exception:  # telemetry must never break emission
                logger.debug("telemetry failed", exc_info=True)

    def emit(self, record: EvaluationRecord, key: Any = None) -> None:
        """Queue the evaluation span of ``record``; returns at once, never raises.

        ``key`` (e.g. a job id) is handed back by :meth:`take_confirmed` once the exporter
        accepted the span; a span that was dropped or failed never confirms its key."""
        try:
            span = evaluation_span(record, self.resource)
        except Exception:
            logger.warning(
                "evaluation record %s/%s has no usable trace id; not emitted",
                getattr(record, "rule", "?"),
                getattr(record, "target_id", "?"),
            )
            with self._cond:
                self._drop(DROP_INVALID)
            return
        with self._cond:
            if self._shutdown:
                self._drop(DROP_SHUTDOWN)
                return
            if len(self._queue) >= self.max_queue:
                self._drop(DROP_QUEUE_FULL)
                return
            self._queue.append((span, key))
            if len(self._queue) >= _BATCH:
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._shutdown and not self._flush_requested:
                    self._cond.wait(_FLUSH_INTERVAL)
                if not self._queue:
                    self._flush_requested = False
                    self._cond.notify_all()
                    if self._shutdown:
                        return
                    continue
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
                self._in_flight = len(batch)
            try:
                result = self.span_exporter.export([span for span, _ in batch])
            except Exception:
                logger.warning("score export raised", exc_info=True)
                result = SpanExportResult.FAILURE
            with self._cond:
                if result is SpanExportResult.SUCCESS:
                    self._exported += len(batch)
                    self._confirmed.extend(key for _, key in batch if key is not None)
                else:
                    self._drop(DROP_EXPORT_FAILED, len(batch))
                self._in_flight = 0
                self._cond.notify_all()

    def take_confirmed(self) -> list[Any]:
        """Keys of spans the exporter accepted since the last call (each handed back once)."""
        with self._cond:
            confirmed, self._confirmed = self._confirmed, []
        return confirmed

    def force_flush(self, timeout_seconds: float = 10) -> bool:
        """Wait until every queued span was exported (or dropped); False on timeout."""
        deadline = time.monotonic() + timeout_seconds
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
            while self._queue or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(remaining)
        return True

    def shutdown(self, timeout_seconds: float = 10) -> None:
        """Flush what is queued (bounded by ``timeout_seconds``), then shut the exporter down."""
        self.force_flush(timeout_seconds)
        with self._cond:
            self._shutdown = True
            leftover = len(self._queue)
            self._queue.clear()
            if leftover:
                self._drop(DROP_SHUTDOWN, leftover)
            self._cond.notify_all()
        try:
            self.span_exporter.shutdown()
        except Exception:
            logger.debug("span exporter shutdown failed", exc_info=True)
        self._thread.join(timeout=1.0)
