"""How one stored trace is read, without calling the judge: ``spanjudge explain TRACE_ID``.

:func:`explain_trace` takes a trace's spans (content log events already joined, as
:func:`~spanjudge.evaluators._rebuild.loading.load_trace` gives them) and the rules, and
returns an :class:`Explanation`: per span, in tree order, its dialect, kind (and the inference
rule that gave it, when no dialect did), conversation id, capture setting, how each of its fields
was found, and the span it is collapsed into when it wraps another span of the same operation;
which rules target it, whether their filter and sampler pick it, and the test case the rule would
evaluate (or why it is skipped; a field the plausibility gate refused with the attribute it came
from, the check it failed and the rule that reads that shape); per conversation of the trace,
its turns and the conversation rules' cases; per rule without a target here, why (the reasons
the planner counts in ``spanjudge.rules.no_target``); the trajectory of each agent turn as read
(the whole trace's when no span is a turn), the filters on it applied. Budgets are not
applied: they depend on the moment.

Rules need a metric, and a metric a judge: :class:`OfflineJudge` stands in for it and refuses
every call, so explaining never reaches a model.

Example::

    rules = [Rule(FaithfulnessMetric(model=OfflineJudge()), target="llm")]
    explanation = explain_trace(trace_id, load_trace(store, trace_id), rules)
    for line in explanation.spans:
        print("  " * line.depth, line.name, line.dialect, line.kind)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._judge.judges.base import Judge, Messages, Usage
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from spanjudge.evaluators._plan.allocation import Allocation
from spanjudge.evaluators._plan.coverage import (
    describe_kinds,
    is_evaluation,
    kinds_seen,
    no_target_reason,
    unrecognised,
)
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import target_kept
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.dialects import fallback, read_span
from spanjudge.evaluators._rebuild.plausibility import Refusal
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import (
    Skip,
    Target,
    conversation_target,
    find_targets,
)
from spanjudge.evaluators._rebuild.trajectory import trace_trajectory, trajectory_of

__all__ = [
    "SHOWN_CHARS",
    "CaseFields",
    "ConversationExplanation",
    "Explanation",
    "OfflineJudge",
    "RuleMiss",
    "RuleVerdict",
    "SpanExplanation",
    "TrajectoryExplanation",
    "explain_trace",
]

SHOWN_CHARS = 200
"""Each text field of a rebuilt case is cut to this many characters (with ``...``)."""


class OfflineJudge(Judge):
    """A judge that is never called: it lets rules be built to explain them.

    Example::

        FaithfulnessMetric(model=OfflineJudge("gpt-4o-mini"))
    """

    def __init__(self, model_name: str = "offline") -> None:
        super().__init__(max_retries=0)
        self.model_name = model_name

    def _complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        raise RuntimeError("spanjudge explain never calls the judge")

    async def _a_complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        raise RuntimeError("spanjudge explain never calls the judge")


@dataclass(slots=True)
class CaseFields:
    """The rebuilt case, cut for reading: LLM cases fill the first fields, conversations
    ``turns`` as (role, text)."""

    input: str | None = None
    actual_output: str | None = None
    retrieval_context: list[str] = field(default_factory=list)
    context_source: str | None = None
    tools_called: list[str] = field(default_factory=list)
    turns: list[tuple[str, str]] = field(default_factory=list)
    found_by: dict[str, str] = field(default_factory=dict)
    inferred: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RuleVerdict:
    """What one rule makes of one target: picked by its filter and sampler, and the case it
    would send to the judge, or the reason it would skip."""

    rule: str
    metric: str
    target_type: str
    passes_filter: bool
    sampled: bool
    sample_rate: float
    case: CaseFields | None = None
    skip: str | None = None
    refusal: Refusal | None = None
    """Set when the plausibility gate refused a field: the field, the attribute it came from,
    the check it failed and the rule that reads that shape."""

    @property
    def status(self) -> str:
        """``filtered`` | ``not sampled`` | ``skipped`` | ``would evaluate``."""
        if not self.passes_filter:
            return "filtered"
        if not self.sampled:
            return "not sampled"
        return "skipped" if self.skip is not None else "would evaluate"


@dataclass(slots=True)
class SpanExplanation:
    """One span as the planner reads it; ``depth`` is its depth in the trace tree."""

    depth: int
    span_id: str
    name: str
    service: str | None
    dialect: str | None
    kind: str | None
    conversation_id: str | None
    capture_off: str | None
    notes: dict[str, str]
    attribute_keys: list[str]
    rules: list[RuleVerdict] = field(default_factory=list)
    kind_rule: str | None = None  # the inference rule behind ``kind``, None: the dialect's
    collapsed_into: str | None = None  # the span evaluated for this one's operation
    found: dict[str, str] = field(default_factory=dict)  # field -> how the dialect read it


@dataclass(slots=True)
class ConversationExplanation:
    """A conversation the trace takes part in: its turn spans (every trace's, when the
    conversation's spans were given) and what the conversation rules make of it."""

    conversation_id: str
    turns: list[tuple[str, str, str]]  # (trace id, span id, span name) in time order
    rules: list[RuleVerdict] = field(default_factory=list)


@dataclass(slots=True)
class RuleMiss:
    """A rule that finds no target in this trace; ``reason`` as counted by the planner."""

    rule: str
    target_type: str
    reason: str
    seen: str


@dataclass(slots=True)
class TrajectoryExplanation:
    """An agent turn's trajectory (``span_id`` the turn's; the trace's root for a trace read
    whole) as :meth:`~spanjudge.evaluators._rebuild.trajectory.Trajectory.lines`."""

    span_id: str | None
    name: str
    lines: list[str]


@dataclass(slots=True)
class Explanation:
    trace_id: str
    spans: list[SpanExplanation]
    conversations: list[ConversationExplanation]
    misses: list[RuleMiss]
    unrecognised: int
    trajectories: list[TrajectoryExplanation] = field(default_factory=list)


def explain_trace(
    trace_id: str,
    spans: list[SpanRecord],
    rules: Iterable[Rule],
    *,
    conversations: Mapping[str, list[SpanRecord]] | None = None,
    allocation: Allocation | None = None,
    now: float | None = None,
) -> Explanation:
    """Explain how ``rules`` read the trace's ``spans`` (see the module docstring).

    ``conversations`` maps a conversation id to all its spans across traces (the CLI loads
    them from the store); a conversation not given is explained from this trace alone.
    ``allocation``: a rule with a budget or precision target is sampled with the probability
    it gives at ``now``, as the planner does (the CLI builds one over its store; without one,
    such a rule shows its cold-start ``sample_rate``). No judge, no network; the store only
    through ``allocation``.
    """
    rules = list(rules)
    at = time.time() if now is None else now

    def _verdict(rule: Rule, target: Target, spans: list[SpanRecord]) -> RuleVerdict:
        rate = (
            allocation.probability(rule, target, spans, at)
            if allocation is not None and rule.has_target
            else rule.sample_rate
        )
        return _rule_verdict(rule, target, spans, rate)

    spans = [s for s in spans if s.trace_id == trace_id]
    verdicts: dict[str, list[RuleVerdict]] = {}
    for rule in rules:
        if rule.target == "conversation":
            continue
        for target in find_targets(rule, spans, apply_filter=False):
            key = target.span_id or ""
            verdicts.setdefault(key, []).append(_verdict(rule, target, spans))
    tree = SpanTree([s for s in spans if not is_evaluation(s)])
    lines = [
        _span_line(span, depth, verdicts.get(span.span_id, []), tree)
        for span, depth in _tree_order(spans)
    ]
    conv_rules = [r for r in rules if r.target == "conversation"]
    return Explanation(
        trace_id=trace_id,
        spans=lines,
        conversations=_conversations(spans, conv_rules, conversations or {}, _verdict),
        misses=_misses(rules, spans),
        unrecognised=len(unrecognised(spans)),
        trajectories=_trajectories(tree, trace_id),
    )


def _trajectories(tree: SpanTree, trace_id: str) -> list[TrajectoryExplanation]:
    """Each agent turn's trajectory (one operation once), else the whole trace's."""
    turns = [
        s
        for s in sorted(tree.spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
        if tree.kind(s) == "agent" and tree.collapsed_into(s) is None
    ]
    found = [(s.span_id, s.name, trajectory_of(tree, s)) for s in turns]
    if not found:
        whole = trace_trajectory(tree, trace_id)
        found = [(whole.span_id, "trace", whole)] if whole.span_id else []
    return [TrajectoryExplanation(i, n, t.lines(SHOWN_CHARS)) for i, n, t in found]


def _tree_order(spans: list[SpanRecord]) -> list[tuple[SpanRecord, int]]:
    """Depth-first from the roots (spans whose parent is not among ``spans``), children by
    start time."""
    tree = SpanTree(spans)
    ordered = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    out: list[tuple[SpanRecord, int]] = []
    seen: set[str] = set()
    stack = [(s, 0) for s in reversed(ordered) if tree.parent(s) is None]
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        out.append((span, depth))
        children = sorted(
            tree.children.get((span.trace_id, span.span_id), ()),
            key=lambda s: (s.start_time_unix_nano, s.span_id),
        )
        stack.extend((child, depth + 1) for child in reversed(children))
    # spans in a parent cycle have no root: shown flat at the end rather than lost
    out.extend((s, 0) for s in ordered if s.span_id not in seen)
    return out


def _span_line(
    span: SpanRecord, depth: int, rules: list[RuleVerdict], tree: SpanTree
) -> SpanExplanation:
    view = read_span(span)
    evaluation = is_evaluation(span)
    kind = view.kind if evaluation else tree.kind(span)
    kind_rule = None if evaluation else tree.how_kind(span)
    if kind_rule is None and view.dialect == fallback.NAME:
        kind_rule = fallback.RULE
    if kind is None and not evaluation and (found := tree.retrieval(span)) is not None:
        kind, kind_rule = "retriever", found[1]
    notes = dict(view.notes)
    if (
        kind == "agent"
        and view.input_text is None
        and view.output_text is None
        and not notes
        and view.capture_off is None
    ):
        # not a capture setting: many frameworks keep a turn's text on its model calls
        notes["text"] = "no text of its own: the turn speaks through its model calls"
    kept = None if evaluation else tree.collapsed_into(span)
    return SpanExplanation(
        depth=depth,
        span_id=span.span_id,
        name=span.name,
        service=span.service_name,
        dialect="spanjudge evaluation" if evaluation else view.dialect,
        kind=kind,
        conversation_id=view.conversation_id,
        capture_off=view.capture_off,
        notes=notes,
        attribute_keys=sorted(span.attributes),
        rules=rules,
        kind_rule=kind_rule,
        collapsed_into=kept.span_id if kept is not None else None,
        found=dict(view.found),
    )


def _rule_verdict(rule: Rule, target: Target, spans: list[SpanRecord], rate: float) -> RuleVerdict:
    built = build_case(rule, target, spans)
    return RuleVerdict(
        rule=rule.name,
        metric=str(getattr(rule.metric, "name", type(rule.metric).__name__)),
        target_type=target.target_type,
        passes_filter=rule.matches(target, SpanTree([s for s in spans if not is_evaluation(s)])),
        sampled=target_kept(rule, target, rate),
        sample_rate=rate,
        case=None if isinstance(built, Skip) else _fields(built),
        skip=built.reason if isinstance(built, Skip) else None,
        refusal=built.refusal if isinstance(built, Skip) else None,
    )


def _conversations(
    spans: list[SpanRecord],
    rules: Sequence[Rule],
    given: Mapping[str, list[SpanRecord]],
    verdict: Callable[[Rule, Target, list[SpanRecord]], RuleVerdict],
) -> list[ConversationExplanation]:
    tree = SpanTree(spans)
    ids = sorted({c for c in map(tree.conversation_of, spans) if c})
    out: list[ConversationExplanation] = []
    for conversation_id in ids:
        conv_spans = given.get(conversation_id) or spans
        target = conversation_target(conversation_id, conv_spans)
        if target is None:
            out.append(ConversationExplanation(conversation_id, []))
            continue
        turns = [(s.trace_id, s.span_id, s.name) for s in target.turn_spans]
        verdicts = [verdict(rule, target, conv_spans) for rule in rules]
        out.append(ConversationExplanation(conversation_id, turns, verdicts))
    return out


def _misses(rules: Sequence[Rule], spans: list[SpanRecord]) -> list[RuleMiss]:
    out: list[RuleMiss] = []
    seen = describe_kinds(kinds_seen(spans), len(unrecognised(spans)))
    for rule in rules:
        reason = no_target_reason(rule, spans)
        if reason is not None:
            out.append(RuleMiss(rule.name, rule.target, reason, seen))
    return out


def _fields(case: LLMTestCase | ConversationalTestCase) -> CaseFields:
    if isinstance(case, ConversationalTestCase):
        return CaseFields(turns=[(t.role, _cut(t.content)) for t in case.turns])
    metadata: dict[str, Any] = case.metadata or {}
    source = metadata.get("context_source")
    return CaseFields(
        input=_cut(case.input),
        actual_output=_cut(case.actual_output),
        retrieval_context=[_cut(text) for text in case.retrieval_context or ()],
        context_source=str(source) if source is not None else None,
        tools_called=[call.name for call in case.tools_called or ()],
        found_by={str(k): str(v) for k, v in (metadata.get("found_by") or {}).items()},
        inferred=[str(f) for f in metadata.get("inferred_fields") or ()],
    )


def _cut(text: str | None) -> str:
    text = " ".join((text or "").split())  # one line per field in a terminal
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."
