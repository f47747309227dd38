"""What planning could not read, said out loud: spans that no dialect recognises and rules that
find no target are counted and logged, never silently dropped.

* :func:`no_target_reason` says why a rule finds no target among a trace's spans (one of
  :data:`~spanjudge._core.metric_names.NO_TARGET_REASONS`); ``spanjudge explain`` shows the
  same reason per trace.
* :class:`Coverage` is the planner's bookkeeping: per settled trace it counts unrecognised spans
  (``spanjudge.planner.unrecognised_spans``, logged once per span shape with the attribute keys
  seen) and, per batch of traces, the traces in which a rule found nothing
  (``spanjudge.rules.no_target``, logged once per rule, service and reason with the span kinds
  found instead).

Names, scopes and attribute keys in these lines come from the sender, so they pass through
:func:`~spanjudge._core.log_text.log_text` (escaped, cut) before they are logged.

Example::

    coverage = Coverage(telemetry)
    coverage.trace(spans, [(rule, no_target_reason(rule, spans))])
    coverage.flush()
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spanjudge._core.log_text import log_text
from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import dialect_of, kind_of, span_shape
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import Target, find_targets
from spanjudge.tracer import _attributes as attrs

if TYPE_CHECKING:
    from spanjudge._core.telemetry import Telemetry
    from spanjudge.evaluators._plan.rules import Rule

logger = logging.getLogger("spanjudge.planner")

KEYS_SHOWN = 30
"""Attribute keys of an unrecognised span listed in its log line."""
KEY_CHARS = 64
"""Characters kept of each listed attribute key (keys come from received spans, unbounded)."""
MEMORY = 10_000
"""Shapes and (rule, service, reason) keys remembered as already logged, oldest forgotten."""

KindCount = Counter[tuple[str, str]]


class LogOnce:
    """A bounded memory of keys already logged: :meth:`first` is True once per key (again
    after the key was forgotten, the oldest first, beyond ``size`` keys)."""

    def __init__(self, size: int = MEMORY) -> None:
        self.size = size
        self._seen: dict[Hashable, None] = {}

    def first(self, key: Hashable) -> bool:
        if key in self._seen:
            return False
        if len(self._seen) >= self.size:
            del self._seen[next(iter(self._seen))]
        self._seen[key] = None
        return True

    def __len__(self) -> int:
        return len(self._seen)


def is_evaluation(span: SpanRecord) -> bool:
    """Our own evaluation spans share the evaluated trace; they are never read as GenAI steps."""
    return attrs.GEN_AI_EVALUATION_NAME in span.attributes


def unrecognised(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    """The spans no dialect recognises (evaluation spans left out). Asks only which dialect
    matches (what ``read_span(span).dialect`` says), without reading the content."""
    return [s for s in spans if not is_evaluation(s) and dialect_of(s) is None]


def kinds_seen(spans: Iterable[SpanRecord]) -> KindCount:
    """(kind, dialect) of every recognised GenAI step among ``spans``, from the markers alone
    (``kind_of``/``dialect_of`` agree with the full reading, tests/evaluators/online/
    test_dialect_kinds.py): a log line about a rule without a target must not read every span's
    content (it cost planning with a conversation rule ~60% of its time, measured)."""
    found: KindCount = Counter()
    for span in spans:
        if is_evaluation(span):
            continue
        dialect = dialect_of(span)
        kind = kind_of(span) if dialect is not None else None
        if kind is not None and dialect is not None:
            found[(kind, str(dialect.NAME))] += 1
    return found


def describe_kinds(kinds: KindCount, unknown: int = 0) -> str:
    """``"agent (openllmetry), chain (openllmetry, genai-semconv), 3 unrecognised"``."""
    dialects: dict[str, list[str]] = {}
    for kind, dialect in sorted(kinds):
        dialects.setdefault(kind, []).append(dialect)
    parts = [f"{kind} ({', '.join(names)})" for kind, names in dialects.items()]
    if unknown:
        parts.append(f"{unknown} unrecognised")
    return ", ".join(parts) or "none"


def no_target_reason(
    rule: Rule,
    spans: list[SpanRecord],
    *,
    found: list[Target] | None = None,
    unfiltered: list[Target] | None = None,
) -> str | None:
    """Why ``rule`` finds no target among the spans of one trace; ``None`` when it finds one.
    ``found`` / ``unfiltered``: the rule's targets with and without its filter, when the caller
    has them already (planning does), so they are not looked for twice.

    Conversation rules: ``None`` when the trace holds a turn with a conversation id (the
    conversation is planned on its own), ``no_conversation`` when its turns carry none.

    Example::

        no_target_reason(Rule(FaithfulnessMetric(), target="llm"), agent_only_trace)
        # -> "no_span_of_kind"
    """
    if rule.target == "conversation":
        tree = SpanTree(spans)
        turns = [s for s in spans if kind_of(s) in ("agent", "llm")]
        if any(tree.conversation_of(s) for s in turns):
            return None
        if turns:
            return "no_conversation"
    else:
        if found is None:
            found = find_targets(rule, spans)
        if found:
            return None
        if rule.filter is not None:
            if unfiltered is None:
                unfiltered = find_targets(rule, spans, apply_filter=False)
            if unfiltered:
                return "filtered"
        if rule.target == "trace":
            return "no_root_span"
    return "no_span_of_kind" if kinds_seen(spans) else "no_genai_span"


def trace_service(spans: list[SpanRecord]) -> str:
    root = next((s for s in spans if s.is_root), spans[0] if spans else None)
    return (root.service_name if root is not None else None) or "?"


@dataclass
class _Misses:
    """Traces of one service in which one rule found nothing, in the current batch."""

    reasons: Counter[str] = field(default_factory=Counter)
    kinds: KindCount = field(default_factory=Counter)
    unknown: int = 0
    example: str = ""


_WHAT = {
    "no_span_of_kind": "found no {target} span in {n} {unit}",
    "filtered": "refused every {target} target by its filter in {n} {unit}",
    "no_genai_span": "found no span any GenAI dialect reads in {n} {unit}",
    "no_root_span": "found no root span in {n} {unit}",
    "no_conversation": "found agent/LLM turns without a conversation id in {n} {unit}",
    "no_turns": "found no agent or LLM turn in {n} {unit}",
}
# what a count is of: conversations for what conversation planning finds, else traces
_PER_CONVERSATION = ("no_turns", "filtered")


class Coverage:
    """The planner's count of what it could not read (see the module docstring).

    Call :meth:`trace` per settled trace, :meth:`conversation` per idle conversation a
    conversation rule cannot evaluate, and :meth:`flush` after each batch: ``no_genai_span``
    traces only count when the rule found no target in any trace of the batch (a health-check
    trace beside real traffic is not a miss).
    """

    def __init__(self, telemetry: Telemetry | None = None, *, memory: int = MEMORY) -> None:
        self.telemetry = telemetry
        self.logged = LogOnce(memory)
        self._found: set[str] = set()
        # keyed by (rule name, its target type, service)
        self._misses: dict[tuple[str, str, str], _Misses] = {}

    def trace(self, spans: list[SpanRecord], reasons: Sequence[tuple[Rule, str | None]]) -> None:
        """One settled trace: its unrecognised spans, and per rule why it found no target
        (``None``: it found one)."""
        if not spans:
            return
        service = trace_service(spans)
        unknown = unrecognised(spans)
        if unknown:
            self._unrecognised(service, unknown)
        kinds: KindCount | None = None
        for rule, reason in reasons:
            if reason is None:
                self._found.add(rule.name)
                continue
            if kinds is None:
                kinds = kinds_seen(spans)
            miss = self._misses.setdefault((rule.name, rule.target, service), _Misses())
            miss.reasons[reason] += 1
            miss.kinds.update(kinds)
            miss.unknown += len(unknown)
            miss.example = miss.example or spans[0].trace_id

    def conversation(
        self, rule: Rule, reason: str, conversation_id: str, spans: list[SpanRecord]
    ) -> None:
        """An idle conversation ``rule`` does not evaluate: ``no_turns`` or ``filtered``."""
        key = (rule.name, rule.target, trace_service(spans))
        miss = self._misses.setdefault(key, _Misses())
        miss.reasons[reason] += 1
        miss.kinds.update(kinds_seen(spans))
        miss.example = miss.example or (spans[0].trace_id if spans else conversation_id)

    def flush(self) -> None:
        """Count and log the batch's misses, then start a new batch."""
        misses, found = self._misses, self._found
        self._misses, self._found = {}, set()
        for (rule, target, service), miss in misses.items():
            for reason, count in sorted(miss.reasons.items()):
                if reason == "no_genai_span" and rule in found:
                    continue
                if self.telemetry is not None:
                    self.telemetry.record_no_target(rule, reason, count)
                if self.logged.first(("rule", rule, service, reason)):
                    what = _WHAT.get(reason, reason + " in {n} {unit}")
                    per_conversation = target == "conversation" and reason in _PER_CONVERSATION
                    unit = "conversation(s)" if per_conversation else "trace(s)"
                    logger.warning(
                        "rule %s %s of service %s; spans seen: %s. "
                        "See how they were read: spanjudge explain %s",
                        rule,
                        what.format(target=target, n=count, unit=unit),
                        log_text(service),
                        describe_kinds(miss.kinds, miss.unknown),
                        miss.example,
                    )

    def _unrecognised(self, service: str, spans: list[SpanRecord]) -> None:
        if self.telemetry is not None:
            self.telemetry.record_unrecognised_spans(service, len(spans))
        for span in spans:
            shape = span_shape(span)
            if not self.logged.first(("shape", shape)):
                continue
            keys = sorted(span.attributes)
            # names and keys come from the sender: escaped and cut, so none forges a log line
            shown = ", ".join(log_text(k, KEY_CHARS) for k in keys[:KEYS_SHOWN]) + (
                f", ... ({len(keys)} keys)" if len(keys) > KEYS_SHOWN else ""
            )
            logger.warning(
                "span '%s' of service %s (scope %s) is read by no GenAI dialect, so no rule can "
                "target it (fine for HTTP or database steps); attributes: %s. "
                "See: spanjudge explain %s",
                log_text(span.name),
                log_text(span.service_name or service),
                log_text(span.scope_name or "?"),
                shown or "none",
                span.trace_id,
            )
