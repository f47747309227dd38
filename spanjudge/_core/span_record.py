"""The span as spanjudge stores and reads it, whatever produced it.

Three producers fill a :class:`SpanRecord`: the in-process store exporter (from the SDK's
``ReadableSpan``), the OTLP/HTTP receiver (from protobuf or JSON bodies) and the stores (from
their rows). Case rebuild, sampling filters and the score emitter consume it. Ids are lower-case
hex (32 characters for trace ids, 16 for span ids), times are Unix nanoseconds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from spanjudge._core.kinds import FeedbackSource, Label, Status, TargetType
from spanjudge.tracer import _attributes as attrs

AttributeValue = Any  # str | bool | int | float | list of those (OTel attribute values)


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(slots=True)
class SpanRecord:
    trace_id: str
    span_id: str
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    parent_span_id: str | None = None
    kind: str = "INTERNAL"  # OTel SpanKind name
    status_code: str = "UNSET"  # UNSET | OK | ERROR
    status_message: str | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    resource: dict[str, AttributeValue] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    scope_name: str | None = None
    #: the W3C ``tracestate`` the span arrived with (its ``ot`` entry's ``rv`` is the trace's
    #: sampling randomness); read at ingest, not stored
    trace_state: str | None = None

    @property
    def service_name(self) -> str | None:
        value = self.resource.get("service.name")
        return str(value) if value is not None else None

    @property
    def conversation_id(self) -> str | None:
        """The conversation (session) id the span carries under any instrumentation's key:
        :data:`~spanjudge.tracer._attributes.CONVERSATION_ID_KEYS` first (first present wins),
        then any key ending in one of :data:`~spanjudge.tracer._attributes.CONVERSATION_ID_NAMES`
        with a string value, then the same names inside a JSON ``metadata`` attribute."""
        a = self.attributes
        for key in attrs.CONVERSATION_ID_KEYS:
            value = a.get(key)
            if value not in (None, ""):
                return str(value)
        for key, value in a.items():
            # the slice test first: endswith over the whole tuple costs more, on every span
            if (
                key[-2:] in ("id", "Id")
                and isinstance(value, str)
                and value
                and key.endswith(attrs.CONVERSATION_ID_NAMES)
            ):
                return value
        return _metadata_conversation(a.get(attrs.METADATA_JSON))

    @property
    def operation(self) -> str | None:
        value = self.attributes.get(attrs.GEN_AI_OPERATION_NAME)
        return str(value) if value is not None else None

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id


def _metadata_conversation(value: Any) -> str | None:
    """A conversation id inside a JSON ``metadata`` attribute, read only when its text names
    one (parsing every span's metadata would cost ingest for nothing)."""
    if not isinstance(value, str) or len(value) > 100_000:
        return None
    if not any(name in value for name in ('"session_id"', '"thread_id"', '"conversation_id"')):
        return None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    for name in ("session_id", "conversation_id", "thread_id"):
        found = parsed.get(name)
        if isinstance(found, str | int) and not isinstance(found, bool) and str(found):
            return str(found)
    return None


@dataclass(slots=True)
class LogEvent:
    """A GenAI content event that arrived as an OTLP log record, kept to be joined to its span.

    Instrumentations in an event content mode (the official OpenAI instrumentation's
    ``event_only``: ``gen_ai.client.inference.operation.details``; older releases: one
    ``gen_ai.user.message`` / ``gen_ai.choice`` ... record per message) send the messages as
    log records carrying the span's trace id and span id instead of span attributes. Producers:
    the receiver's ``/v1/logs`` and the in-process log record processor; consumer: the span
    reading layer, which reads them as part of their span. Ids as in :class:`SpanRecord`.
    """

    trace_id: str
    span_id: str | None
    event_name: str
    time_unix_nano: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    body: Any = None
    resource: dict[str, AttributeValue] = field(default_factory=dict)
    scope_name: str | None = None


def evaluation_span_id(
    rule: str, target_type: TargetType, target_id: str, revision: int = 0
) -> str:
    """The evaluation span's id, derived from (rule, target) so a re-emitted result is the
    same span and a backend that de-duplicates by id shows it once. 16 lower-case hex chars,
    never all zeros (an invalid span id in OTel).

    ``revision`` (how many earlier results of the target were superseded: an errored result
    redone by ``backfill --retry-errors``, a conversation judged again) is folded in when it
    is not 0, so a redone result is a span of its own while a never-redone result keeps the
    id it always had::

        first = evaluation_span_id("bias", "agent", "00f1")
        assert evaluation_span_id("bias", "agent", "00f1", revision=1) != first
    """
    key = f"{rule}\x1f{target_type}\x1f{target_id}"
    if revision:
        key += f"\x1f{revision}"
    digest = hashlib.sha256(key.encode()).hexdigest()
    return digest[:16] if int(digest[:16], 16) else digest[16:32]


@dataclass(slots=True)
class EvaluationRecord:
    """One metric's outcome on one target: what the store keeps and the emitter writes.

    ``status`` is ``"scored"`` (score/label/success set), ``"error"`` (``error_type`` set, no
    score: never shown as 0 or 1) or ``"skipped"`` (``skip_reason`` set, no judge call).
    """

    rule: str
    metric: str  # gen_ai.evaluation.name, e.g. "faithfulness"
    target_type: TargetType
    target_id: str  # span id, trace id or conversation id
    trace_id: str | None  # trace the evaluation span goes into
    span_id: str | None  # evaluated span: parent of the evaluation span
    status: Status = "scored"
    score: float | None = None
    label: Label | None = None
    success: bool | None = None
    threshold: float | None = None
    strict_mode: bool = False
    reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    skip_reason: str | None = None
    judge_model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    judge_calls: int = 0
    verdicts: list[dict[str, Any]] | None = None
    sample_rate: float | None = None
    service_name: str | None = None
    # gen_ai.response.id of the evaluated span, when it has one (the event carries it)
    response_id: str | None = None
    # where the retrieval context came from: retrieval | tool_results | system_instructions
    context_source: str | None = None
    target_end_unix_nano: int | None = None
    # reused from the judge-result cache: no judge call was made for this result
    cached: bool = False
    started_at: float | None = None  # Unix seconds
    finished_at: float | None = None
    # what the result is grouped by in summaries and comparisons (service, service.version,
    # model, agent and the rule's segment_keys): evaluators/_review/segments.py
    segments: dict[str, str] | None = None
    # earlier results of this target superseded when this one was made (0: the first)
    revision: int = 0
    # the judge's own trace (judge tracing on): its trace id and root span id, hex; the
    # evaluation span links to that root (evaluators/_judge/judges/judge_trace.py)
    judge_trace_id: str | None = None
    judge_span_id: str | None = None

    @property
    def evaluation_span_id(self) -> str:
        return evaluation_span_id(self.rule, self.target_type, self.target_id, self.revision)


@dataclass(slots=True)
class FeedbackRecord:
    """A person's label on an evaluated (or not yet evaluated) target, kept beside the results.

    Producers: ``spanjudge.feedback()``, the worker's ``POST /v1/feedback`` and
    ``spanjudge feedback``; consumers: the store (matched to results when read), agreement
    statistics, and the score emitter (a ``spanjudge.feedback`` log event on the target span).
    The target is a span (``trace_id`` + ``span_id``), a whole trace (``trace_id`` only) or a
    conversation (``conversation_id``; ``trace_id`` then names the trace the event goes to).
    """

    metric: str
    label: Label
    trace_id: str | None = None
    span_id: str | None = None
    conversation_id: str | None = None
    rule: str | None = None  # only this rule's results, else every rule of the metric
    score: float | None = None  # the person's own score in [0, 1], when they gave one
    note: str | None = None
    annotator: str | None = None
    source: FeedbackSource = "python"
    created_at: float = 0.0  # Unix seconds
    feedback_id: int = 0  # set by the store
    emitted_at: float | None = None
