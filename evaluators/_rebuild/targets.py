"""What a rule evaluates (:class:`Target`), why a target was not evaluated (:class:`Skip`), and
how targets are found in stored spans, whatever instrumentation wrote them (every span is read
through :func:`~spanjudge.evaluators._rebuild.dialects.read_span`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spanjudge._core.kinds import TARGET_TYPES as TARGET_TYPES
from spanjudge._core.kinds import TargetType
from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import kind_of
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.tracer import _attributes as attrs

if TYPE_CHECKING:
    from spanjudge.evaluators._plan.rules import Rule
    from spanjudge.evaluators._rebuild.plausibility import Refusal


@dataclass(slots=True)
class Target:
    """One thing a rule evaluates.

    * ``llm`` / ``agent``: ``target_id`` is the span id; ``span_id``/``span`` that span.
    * ``trace``: ``target_id`` is the trace id; ``span_id``/``span`` the root span.
    * ``conversation``: ``target_id`` is the conversation id; ``trace_id``/``span_id``/``span``
      are the LAST turn's (the evaluation span is attached there) and ``turn_spans`` holds
      every top-most turn span in time order.

    Example::

        Target("llm", "00f067aa0ba902b7", "4bf92f3577b34da6a3ce929d0e0e4736",
               "00f067aa0ba902b7", None, span, "shop", span.end_time_unix_nano)
    """

    target_type: TargetType
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
    ``error_type`` is the result's: ``missing_field``, or ``implausible_field`` when the
    plausibility gate refused a field (``refusal`` says which, the check and the rule that
    reads that shape: :mod:`.plausibility`).

    Example::

        Skip("missing retrieval_context: no retriever spans in this turn", ["retrieval_context"])
    """

    reason: str
    missing: list[str] = field(default_factory=list)
    error_type: str = "missing_field"
    refusal: Refusal | None = None


def span_kind(span: SpanRecord) -> str | None:
    """``agent``/``llm``/``retriever``/``tool``/``chain`` or ``None`` (not a GenAI step)."""
    return kind_of(span)


def is_llm_span(span: SpanRecord) -> bool:
    return span_kind(span) == "llm"


def is_agent_span(span: SpanRecord) -> bool:
    return span_kind(span) == "agent"


def _evaluation(span: SpanRecord) -> bool:
    # our own evaluation spans live in the evaluated trace: never targets, never "the end"
    return attrs.GEN_AI_EVALUATION_NAME in span.attributes


def find_targets(
    rule: Rule,
    spans: list[SpanRecord],
    *,
    apply_filter: bool = True,
    conversations: bool = True,
) -> list[Target]:
    """The rule's targets among the spans of ONE trace, filter applied (unless
    ``apply_filter=False``), in start-time order.

    ``conversations=False`` leaves ``conversation_id`` unset: finding a span's conversation
    reads the span (and its ancestors) through the dialects in full, which planning does only
    for the targets its sampler keeps (:func:`with_conversation`).

    ``llm``: every LLM span; ``agent``: every agent span (a turn, whatever the library calls
    it, or the turn :mod:`.inference` infers where no span is marked as an agent); spans that
    describe one operation (a wrapper and what it wraps) give one target, the span carrying the
    text; ``trace``: the root span (no target while the root has not arrived). Conversation
    targets come from :func:`conversation_target`.

    Example::

        for target in find_targets(Rule(FaithfulnessMetric(), target="llm"), trace_spans):
            print(target.target_id, target.span.name)
    """
    if rule.target == "conversation":
        return []
    tree = target_tree(spans)
    spans = tree.spans
    ordered = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    if rule.target == "trace":
        roots = [s for s in ordered if s.is_root]
        if not roots or (apply_filter and not rule.matches_span(roots[0], tree)):
            return []
        root = roots[0]
        end = max(
            (s.end_time_unix_nano for s in spans if s.trace_id == root.trace_id), default=None
        )
        return [
            Target(
                "trace",
                root.trace_id,
                root.trace_id,
                root.span_id,
                tree.conversation_of(root) if conversations else None,
                root,
                root.service_name,
                end,
            )
        ]
    return [
        Target(
            rule.target,
            span.span_id,
            span.trace_id,
            span.span_id,
            tree.conversation_of(span) if conversations else None,
            span,
            span.service_name,
            span.end_time_unix_nano,
        )
        for span in ordered
        if tree.kind(span) == rule.target
        and tree.collapsed_into(span) is None
        and (not apply_filter or _matches(rule, span, tree))
    ]


def _matches(rule: Rule, span: SpanRecord, tree: SpanTree) -> bool:
    """A filter matches one operation when it matches any span that describes it (the kept
    span or a wrapper collapsed into it: a run span may carry the agent name, the inner span
    the content)."""
    if rule.matches_span(span, tree):
        return True
    return any(rule.matches_span(other, tree) for other in tree.collapsed_from(span))


def target_tree(spans: list[SpanRecord]) -> SpanTree:
    """The span tree :func:`find_targets` reads conversation ids from (evaluation spans left
    out), for :func:`with_conversation`."""
    return SpanTree([s for s in spans if not _evaluation(s)])


def with_conversation(target: Target, tree: SpanTree) -> Target:
    """``target`` (found with ``conversations=False``; ``tree``: :func:`target_tree` of the
    same spans) with its conversation id set as :func:`find_targets` would have set it."""
    if target.span is not None and target.target_type != "conversation":
        target.conversation_id = tree.conversation_of(target.span)
    return target


def turn_spans(conversation_id: str, spans: list[SpanRecord]) -> list[SpanRecord]:
    """A conversation's turns: the top-most agent spans in it (agent spans nested in another
    agent span of the conversation are sub-agents), else the top-most LLM spans, in time
    order. A span is in the conversation when it, or an ancestor, carries the id."""
    spans = [s for s in spans if not _evaluation(s)]
    tree = SpanTree(spans)
    ordered = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.trace_id, s.span_id))
    for wanted in ("agent", "llm"):
        candidates = [
            s
            for s in ordered
            if tree.kind(s) == wanted and tree.conversation_of(s) == conversation_id
        ]
        ids = {(s.trace_id, s.span_id) for s in candidates}
        top = [
            s
            for s in candidates
            if not any((a.trace_id, a.span_id) in ids for a in tree.ancestors(s))
        ]
        if top:
            return top
    return []


def conversation_target(conversation_id: str, spans: list[SpanRecord]) -> Target | None:
    """The conversation as one target, or ``None`` when it has no turn spans. The evaluation
    span goes to the last turn."""
    turns = turn_spans(conversation_id, spans)
    if not turns:
        return None
    last = turns[-1]
    return Target(
        "conversation",
        conversation_id,
        last.trace_id,
        last.span_id,
        conversation_id,
        last,
        last.service_name,
        max(s.end_time_unix_nano for s in turns),
        tuple(turns),
    )
