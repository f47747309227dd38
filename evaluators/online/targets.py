"""What a rule evaluates (:class:`Target`), why a target was not evaluated (:class:`Skip`),
and how a span's kind is recognised whatever instrumentation wrote it.

Pure data and pure functions over :class:`~spanjudge.exporters.records.SpanRecord` lists:
no store, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spanjudge.exporters.records import SpanRecord
from spanjudge.tracer import attributes as attrs

TARGET_TYPES: tuple[str, ...] = ("llm", "agent", "trace", "conversation")

# OpenLLMetry marks LLM spans with llm.request.type instead of gen_ai.operation.name.
_OPENLLMETRY_LLM_TYPES = frozenset({"chat", "completion"})


@dataclass(slots=True)
class Target:
    """One thing a rule evaluates.

    * ``llm`` / ``agent``: ``target_id`` is the span id; ``span_id``/``span`` that span.
    * ``trace``: ``target_id`` is the trace id; ``span_id``/``span`` the root span.
    * ``conversation``: ``target_id`` is the conversation id; ``trace_id``/``span_id``/``span``
      are the LAST agent turn's (the evaluation span is attached there) and ``turn_spans`` holds
      every top-most agent turn span in time order.

    Example::

        Target("llm", "00f067aa0ba902b7", "4bf92f3577b34da6a3ce929d0e0e4736",
               "00f067aa0ba902b7", None, span, "shop", span.end_time_unix_nano)
    """

    target_type: str
    target_id: str
    trace_id: str | None
    span_id: str | None
    conversation_id: str | None
    span: SpanRecord | None
    service_name: str | None
    end_unix_nano: int | None
    turn_spans: tuple[SpanRecord, ...] = field(default=(), repr=False)


@dataclass(slots=True)
class Skip:
    """A target that is not sent to the judge, and why.

    ``missing`` names the test-case fields the metric needed and the spans did not give
    (empty when the skip has another cause, e.g. a failing custom ``build_case``).

    Example::

        Skip("missing retrieval_context: no retriever spans in this turn", ["retrieval_context"])
    """

    reason: str
    missing: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ span kinds
def _str_attr(span: SpanRecord, key: str) -> str | None:
    value = span.attributes.get(key)
    return value if isinstance(value, str) and value else None


def span_kind(span: SpanRecord) -> str | None:
    """``agent``/``llm``/``retriever``/``tool``/``chain`` or ``None`` (not a GenAI span).

    ``gen_ai.operation.name`` decides first (any instrumentation following the semconv), then
    our own ``spanjudge.kind``, then OpenLLMetry's ``llm.request.type``.
    """
    operation = _str_attr(span, attrs.GEN_AI_OPERATION_NAME)
    if operation is not None:
        if operation in attrs.LLM_OPERATIONS:
            return "llm"
        kind = attrs.KIND_BY_OPERATION.get(operation)
        if kind is not None:
            return kind
    kind = _str_attr(span, attrs.SPANJUDGE_KIND)
    if kind in attrs.KINDS:
        return kind
    if _str_attr(span, attrs.LLM_REQUEST_TYPE) in _OPENLLMETRY_LLM_TYPES:
        return "llm"
    return None


def is_llm_span(span: SpanRecord) -> bool:
    return span_kind(span) == "llm"


def is_agent_span(span: SpanRecord) -> bool:
    return span_kind(span) == "agent"
