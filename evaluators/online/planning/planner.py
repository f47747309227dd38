"""Planning: settled traces and idle conversations become job rows, one per (rule, target).

A target becomes a job when the rule's filter, its deterministic sampler and its budgets let it
through; everything else is counted as skipped, by reason. What planning cannot read is counted
and logged too (:mod:`~spanjudge.evaluators.online.planning.coverage`): spans no dialect
recognises, and rules that find no target in a settled trace. The store ignores a (rule, target)
pair it has seen before, so planning twice is harmless. Pure bookkeeping over the store: no judge
calls happen here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spanjudge.evaluators.online.planning.coverage import Coverage, no_target_reason
from spanjudge.evaluators.online.planning.rules import Rule
from spanjudge.evaluators.online.planning.sampler import Budget, is_sampled
from spanjudge.evaluators.online.rebuild.loading import load_conversation, load_traces
from spanjudge.evaluators.online.rebuild.scope import SpanTree
from spanjudge.evaluators.online.rebuild.targets import (
    Target,
    conversation_target,
    find_targets,
    target_tree,
    with_conversation,
)
from spanjudge.exporters.records import SpanRecord
from spanjudge.exporters.store import JobSpec, SpanStore

if TYPE_CHECKING:
    from spanjudge.exporters.telemetry import Telemetry

# Settled ids read per store query, and planned per write transaction (jobs and marks).
PAGE = 500
# Traces whose spans are read at once: two reads per chunk instead of two per trace, and at most
# this many traces' spans (with their content) in memory.
LOAD_CHUNK = 50


@dataclass
class TickReport:
    """What one tick did; returned by :meth:`Monitor.tick` and logged at debug level."""

    planned_traces: int = 0
    planned_conversations: int = 0
    jobs_enqueued: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    claimed: int = 0
    scored: int = 0
    errors: int = 0
    missing: int = 0
    retried: int = 0
    lost_lease: int = 0
    reemitted: int = 0
    requeued: int = 0
    deleted_spans: int = 0

    def count_skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count


class Planner:
    """Turns what settled into jobs under ``rules``; owns the rules' budgets.

    Example::

        planner = Planner(rules, store, clock=time.time)
        planner.plan(report, now=time.time(), settle_seconds=10, idle_seconds=300)
    """

    def __init__(
        self,
        rules: Mapping[str, Rule],
        store: SpanStore,
        *,
        clock: Callable[[], float],
        telemetry: Telemetry | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.rules = rules
        self.store = store
        self.telemetry = telemetry
        self._stopping = stopping or threading.Event()
        self.coverage = Coverage(telemetry)
        self.budgets: dict[str, Budget] = {}
        now = clock()
        day_start = now - (now % 86400)
        for rule in rules.values():
            budget = Budget(
                max_per_minute=rule.max_per_minute, max_cost_per_day=rule.max_cost_per_day
            )
            if rule.max_cost_per_day is not None:
                budget.seed(self.store.results_cost_since(rule=rule.name, since=day_start))
            self.budgets[rule.name] = budget

    def record_cost(self, rule: str, cost: float, now: float) -> None:
        """Charge a finished evaluation's judge cost to its rule's daily budget."""
        budget = self.budgets.get(rule)
        if budget is not None:
            budget.record(cost, now)

    def plan(
        self, report: TickReport, *, now: float, settle_seconds: float, idle_seconds: float
    ) -> None:
        """Plan every settled trace and idle conversation, a page at a time (planned ids drop
        out of the next page, so a backlog never waits a whole interval per page)."""
        while not self._stopping.is_set():
            more = self.plan_page(
                report, now=now, settle_seconds=settle_seconds, idle_seconds=idle_seconds
            )
            if not more:
                break

    def plan_page(
        self,
        report: TickReport,
        *,
        now: float,
        settle_seconds: float,
        idle_seconds: float,
        limit: int = PAGE,
    ) -> bool:
        """Plan at most ``limit`` settled traces and ``limit`` idle conversations, oldest first:
        the bounded step the monitor takes between job claims. True when a page was full (more
        may be waiting)."""
        traces = self.store.settled_traces(settle_seconds=settle_seconds, now=now, limit=limit)
        self.plan_traces(traces, report, now)
        # without a conversation rule they are still marked planned, so they do not count as
        # backlog forever
        conversations = self.store.idle_conversations(
            idle_seconds=idle_seconds, now=now, limit=limit
        )
        self.plan_conversations(conversations, report, now)
        return len(traces) >= limit or len(conversations) >= limit

    def plan_traces(self, trace_ids: Sequence[str], report: TickReport, now: float) -> None:
        """Plan these traces, a page at a time: each page's spans are read a chunk of traces at
        a time, and its jobs and its "planned" marks are written in one transaction."""
        for start in range(0, len(trace_ids), PAGE):
            self._plan_trace_page(trace_ids[start : start + PAGE], report, now)
        self.coverage.flush()

    def _plan_trace_page(self, page: Sequence[str], report: TickReport, now: float) -> None:
        specs: list[JobSpec] = []
        # read even with conversation rules alone: a conversation whose turns no dialect
        # reads would otherwise never appear, and nothing would say why
        if self.rules:
            for start in range(0, len(page), LOAD_CHUNK):
                chunk = page[start : start + LOAD_CHUNK]
                by_trace = load_traces(self.store, chunk)
                for trace_id in chunk:
                    self._plan_trace(by_trace.get(trace_id, []), specs, report, now)
        report.jobs_enqueued += self.store.enqueue_planned(specs, traces=page, now=now)
        report.planned_traces += len(page)

    def _plan_trace(
        self, spans: list[SpanRecord], specs: list[JobSpec], report: TickReport, now: float
    ) -> None:
        tree: SpanTree | None = None
        reasons: list[tuple[Rule, str | None]] = []
        for rule in self.rules.values():
            if rule.target == "conversation":
                continue
            # a target's conversation is looked up only once its sampler keeps it (the lookup
            # reads the span's content through the dialects; most targets are not sampled)
            targets = find_targets(rule, spans, conversations=False)
            for target in targets:
                if not self._sampled(rule, target, report):
                    continue
                if tree is None:
                    tree = target_tree(spans)
                spec = self._admit(rule, with_conversation(target, tree), report, now)
                if spec is not None:
                    specs.append(spec)
            every = targets
            if rule.filter is not None:
                # spans of the rule's kind its filter turned away, counted like the
                # conversations a conversation rule's filter refuses
                every = find_targets(rule, spans, apply_filter=False, conversations=False)
                if len(every) > len(targets):
                    self.skip(rule, "filtered", report, len(every) - len(targets))
            reason = (
                None if targets else no_target_reason(rule, spans, found=targets, unfiltered=every)
            )
            reasons.append((rule, reason))
        reasons.extend(
            (rule, no_target_reason(rule, spans))
            for rule in self.rules.values()
            if rule.target == "conversation"
        )
        self.coverage.trace(spans, reasons)

    def plan_conversations(
        self, conversation_ids: Sequence[str], report: TickReport, now: float
    ) -> None:
        """Plan these conversations; each page's jobs and marks are written in one transaction."""
        conv_rules = [r for r in self.rules.values() if r.target == "conversation"]
        for start in range(0, len(conversation_ids), PAGE):
            page = conversation_ids[start : start + PAGE]
            specs: list[JobSpec] = []
            for conversation_id in page if conv_rules else ():
                spans = load_conversation(self.store, conversation_id)
                target = conversation_target(conversation_id, spans)
                if target is None:
                    for rule in conv_rules:
                        self.coverage.conversation(rule, "no_turns", conversation_id, spans)
                    continue
                for rule in conv_rules:
                    if rule.matches(target):
                        if self._sampled(rule, target, report):
                            spec = self._admit(rule, target, report, now)
                            if spec is not None:
                                specs.append(spec)
                    else:
                        self.skip(rule, "filtered", report)
                        self.coverage.conversation(rule, "filtered", conversation_id, spans)
            report.jobs_enqueued += self.store.enqueue_planned(specs, conversations=page, now=now)
            report.planned_conversations += len(page)
        self.coverage.flush()

    def _sampled(self, rule: Rule, target: Target, report: TickReport) -> bool:
        if is_sampled(rule.name, target.target_id, rule.sample_rate):
            return True
        self.skip(rule, "not_sampled", report)
        return False

    def _admit(self, rule: Rule, target: Target, report: TickReport, now: float) -> JobSpec | None:
        """A sampled target, unless its rule's budget refuses it."""
        refused = self.budgets[rule.name].allow(now)
        if refused is not None:
            self.skip(rule, refused, report)
            return None
        return JobSpec(
            rule=rule.name,
            target_type=target.target_type,
            target_id=target.target_id,
            trace_id=target.trace_id,
            span_id=target.span_id,
            conversation_id=target.conversation_id,
            sample_rate=rule.sample_rate,
        )

    def skip(self, rule: Rule, reason: str, report: TickReport, count: int = 1) -> None:
        report.count_skip(reason, count)
        if self.telemetry is not None:
            self.telemetry.record_skip(rule.name, reason, count)
