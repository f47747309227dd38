"""Late human labels: a ``fail`` on a trace its rules passed over queues its evaluation.

A person's ``fail`` label is a risk signal (:mod:`~spanjudge.evaluators._plan.risk`):
a trace labelled before it is planned is sampled at its rules' ``risk_sample_rate``. A label
that comes after the trace was planned and not sampled would be lost; :class:`LabelWatch` reads
the labels given since its last look and plans their traces again for the rules that state a
budget or precision target (fixed-rate rules decide by the hash alone, so planning them again
would change nothing). Targets that have a job already are passed over, as in any planning; a
trace whose spans retention deleted finds no target and is left. The new jobs record the risk
probability like any other.

Example::

    watch = LabelWatch(planner, since=time.time())
    watch.tick(report, now=time.time())   # once per monitor tick: jobs for late fail labels
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spanjudge._store.models import JobSpec
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.sampler import target_kept
from spanjudge.evaluators._rebuild.loading import load_traces
from spanjudge.evaluators._rebuild.targets import find_targets, target_tree, with_conversation

if TYPE_CHECKING:
    from spanjudge._core.span_record import FeedbackRecord

__all__ = ["LABELS_PER_TICK", "LabelWatch"]

LABELS_PER_TICK = 1000
"""Labels read per tick; more wait for the next one."""


class LabelWatch:
    """Queues, for target rules, the targets of traces a person labelled ``fail`` since the
    last tick. ``since``: labels older than this were seen by planning already (the worker's
    start; a restart does not look at older labels: their traces were planned with the label
    visible, or are gone). Jobs are enqueued without marking the trace planned, so a trace not
    planned yet is still planned in full when it settles (its labelled targets passed over)."""

    def __init__(self, planner: Planner, *, since: float) -> None:
        self._planner = planner
        self._rules = [
            r for r in planner.rules.values() if r.has_target and r.target != "conversation"
        ]
        self._since = since
        self._seen: set[int] = set()

    def _new_fail_labels(self) -> list[FeedbackRecord]:
        read = getattr(self._planner.store, "feedback", None)
        if read is None:
            return []
        labels: list[FeedbackRecord] = read(since=self._since, limit=LABELS_PER_TICK)
        fresh = [label for label in labels if label.feedback_id not in self._seen]
        if labels:
            newest = max(label.created_at for label in labels)
            if newest > self._since:  # ids at the boundary are kept: equal times come back
                self._seen = {lb.feedback_id for lb in labels if lb.created_at == newest}
                self._since = newest
            else:
                self._seen.update(label.feedback_id for label in labels)
        return [label for label in fresh if label.label == "fail" and label.trace_id]

    def tick(self, report: TickReport, *, now: float) -> int:
        """Queue the sampled targets of the traces of new ``fail`` labels; returns how many
        jobs were new (also added to ``report.jobs_enqueued``)."""
        if not self._rules:
            return 0
        traces = sorted({label.trace_id for label in self._new_fail_labels() if label.trace_id})
        if not traces:
            return 0
        planner, store = self._planner, self._planner.store
        planner.allocation.forget_labels(traces)
        planned = store.planned_targets(traces)
        specs: list[JobSpec] = []
        for spans in load_traces(store, traces).values():
            if not spans:
                continue  # deleted by retention: nothing left to judge
            tree = None
            for rule in self._rules:
                for target in find_targets(rule, spans, conversations=False):
                    if (rule.name, target.target_type, target.target_id) in planned:
                        continue
                    rate = planner.allocation.probability(rule, target, spans, now)
                    tree = tree or target_tree(spans)
                    target = with_conversation(target, tree)
                    if not target_kept(rule, target, rate):
                        continue
                    spec = planner.admit(rule, target, report, now, rate)
                    if spec is not None:
                        specs.append(spec)
        added = store.enqueue_jobs(specs, now=now) if specs else 0
        report.jobs_enqueued += added
        return added
