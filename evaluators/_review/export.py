"""Stored results back into test cases: production failures as a regression dataset.

For each selected result, the target's spans are read from the store and the test case is
rebuilt as the evaluation rebuilt it (the configured rule when there is one, so its filter-free
targeting and ``build_case`` hook apply; else the metric's built-in rule on the result's target
type). Each case carries, in its metadata, where it came from and what was said about it: the
judge's score, label, reason and verdicts, and the people's labels.

The ``label`` filter reads the *verdict*: a person's latest label when the target has one (a
person who overruled the judge is right for a regression set), else the judge's.

Example::

    exported = export_cases(store, metric="faithfulness", label="fail", since=t - 7 * 86400)
    write_dataset([item.golden() for item in exported.items], "failing.json")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.dataset import golden
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.loading import load_conversation, load_trace
from spanjudge.evaluators._rebuild.targets import Skip, conversation_target, find_targets

__all__ = ["ExportItem", "Exported", "export_cases", "verdict"]


def verdict(result: EvaluationRecord, labels: list[FeedbackRecord]) -> str | None:
    """The latest person's label on the result, else the judge's (None: no score)."""
    return labels[-1].label if labels else result.label


@dataclass
class ExportItem:
    """One rebuilt case with the result and the labels it came with."""

    case: LLMTestCase | ConversationalTestCase
    result: EvaluationRecord
    labels: list[FeedbackRecord]

    def metadata(self) -> dict[str, Any]:
        r = self.result
        human = self.labels[-1] if self.labels else None
        return {
            "source": "spanjudge",
            "trace_id": r.trace_id,
            "span_id": r.span_id,
            "target_type": r.target_type,
            "target_id": r.target_id,
            "service": r.service_name,
            "rule": r.rule,
            "metric": r.metric,
            "judge": {
                "score": r.score,
                "label": r.label,
                "threshold": r.threshold,
                "reason": r.reason,
                "verdicts": r.verdicts,
                "model": r.judge_model,
            },
            "human": None
            if human is None
            else {
                "label": human.label,
                "score": human.score,
                "note": human.note,
                "annotator": human.annotator,
                "labels": len(self.labels),
            },
            "verdict": verdict(r, self.labels),
            "case_metadata": self.case.metadata,
        }

    def golden(self) -> dict[str, Any]:
        """This case as a deepeval golden object (the person's note as ``comments``)."""
        note = self.labels[-1].note if self.labels else None
        name = f"{self.result.metric} {self.result.target_type} {self.result.target_id}"
        self.case.name = self.case.name or name
        return golden(self.case, comments=note, metadata=self.metadata())


@dataclass
class Exported:
    """What :func:`export_cases` found: the cases, and the results it could not rebuild."""

    items: list[ExportItem] = field(default_factory=list)
    skipped: list[tuple[EvaluationRecord, str]] = field(default_factory=list)


def _default_rule(result: EvaluationRecord) -> Rule | None:
    from spanjudge.evaluators._judge.metrics.bias import BiasMetric
    from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
    from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
    from spanjudge.evaluators._review.explain import OfflineJudge

    # the metric only says which fields the case needs: its judge is never called (nor are
    # the topics read)
    judge = OfflineJudge()
    metric: Any = {
        "faithfulness": lambda: FaithfulnessMetric(model=judge),
        "bias": lambda: BiasMetric(model=judge),
        "topic_adherence": lambda: TopicAdherenceMetric(relevant_topics=["-"], model=judge),
    }.get(result.metric)
    if metric is None:
        return None
    return Rule(metric(), target=result.target_type, name=result.rule)


def rebuild(
    store: SpanStore, result: EvaluationRecord, rules: Mapping[str, Rule]
) -> LLMTestCase | ConversationalTestCase | str:
    """The result's test case, rebuilt from the stored spans, or why it cannot be."""
    rule = rules.get(result.rule) or _default_rule(result)
    if rule is None:
        return f"metric {result.metric!r} has no built-in rule; pass the worker config"
    if result.target_type == "conversation":
        spans = load_conversation(store, result.target_id)
        target = conversation_target(result.target_id, spans)
    else:
        spans = load_trace(store, result.trace_id) if result.trace_id else []
        found = [
            t
            for t in find_targets(rule, spans, apply_filter=False)
            if t.target_id == result.target_id
        ]
        target = found[0] if found else None
    if target is None:
        return "target spans not in the store (deleted by retention?)"
    case = build_case(rule, target, spans)
    return case.reason if isinstance(case, Skip) else case


def export_cases(
    store: SpanStore,
    *,
    metric: str | None = None,
    rule: str | None = None,
    label: str | None = None,
    since: float | None = None,
    limit: int = 10_000,
    rules: Mapping[str, Rule] | None = None,
) -> Exported:
    """Rebuild the test cases of scored results matching the filters (``label``: the
    verdict, see the module docstring), oldest first."""
    results = [
        r
        for r in store.results(metric=metric, rule=rule, since=since, limit=limit)
        if r.status == "scored"
    ]
    out = Exported()
    for result, labels in zip(results, store.feedback_on(results), strict=True):
        if label is not None and verdict(result, labels) != label:
            continue
        case = rebuild(store, result, rules or {})
        if isinstance(case, str):
            out.skipped.append((result, case))
        else:
            out.items.append(ExportItem(case, result, labels))
    return out
