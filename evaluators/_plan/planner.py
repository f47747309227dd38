"""Planning: settled traces and idle conversations become job rows, one per (rule, target).

A target becomes a job when the rule's filter, its deterministic sampler and its budgets let it
through; everything else is counted as skipped, by reason. What planning cannot read is counted
and logged too (:mod:`~spanjudge.evaluators._plan.coverage`): spans no dialect
recognises, and rules that find no target in a settled trace. A (rule, target) pair that has a
job already is passed over (no sampling, no budget), so planning twice is harmless. Pure
bookkeeping over the store: no judge calls happen here.

What arrives late is planned again (:mod:`~spanjudge._store.late_spans` records it): a trace
that got spans after it was planned settles again and is planned for the targets among those
spans only (the others keep their one job and result); a conversation that got a new turn after
it was judged is judged again over all its turns, its earlier result kept as superseded. Both
are counted (:class:`TickReport`, :attr:`Planner.late`) and said at INFO at most once a minute.

A busy trace (a span every second never leaves it quiet for ``settle_seconds``) is planned
anyway once its first unplanned span has waited ``max_delay_seconds``: it is not marked planned,
the store notes instead that its spans up to ``now - settle_seconds`` were seen, so what comes
after is planned as late (the targets planned already keep their one job), at the next bound
or once the trace settles.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spanjudge._core.log_text import log_text
from spanjudge._core.span_record import SpanRecord
from spanjudge._store.models import LEASED, PENDING, JobSpec, Redo
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._plan.allocation import Allocation
from spanjudge.evaluators._plan.coverage import Coverage, no_target_reason
from spanjudge.evaluators._plan.late_arrivals import (
    LateCounts,
    LateLog,
    among,
    covers,
    late_among,
)
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import Budget, target_kept
from spanjudge.evaluators._rebuild.loading import load_conversation, load_traces
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import (
    Target,
    conversation_target,
    find_targets,
    target_tree,
    with_conversation,
)

if TYPE_CHECKING:
    from spanjudge._core.telemetry import Telemetry


logger = logging.getLogger("spanjudge.planner")

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
    # late arrivals: traces planned again for spans that came after they were planned, those
    # spans, the targets among them planned; conversations judged again for new turns
    replanned_traces: int = 0
    late_spans: int = 0
    late_targets: int = 0
    rejudged_conversations: int = 0
    # errored results redone (backfill --retry-errors)
    retried_errors: int = 0
    # traces planned before they settled: busy past the settle delay bound (also counted in
    # planned_traces)
    busy_traces: int = 0

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
        #: late arrivals planned again, since start (see :class:`LateCounts`)
        self.late = LateCounts()
        self._late_log = LateLog()
        self.budgets: dict[str, Budget] = {}
        #: per-segment probabilities of the rules that state a budget or a precision
        self.allocation = Allocation(store)
        now = clock()
        day_start = now - (now % 86400)
        for rule in rules.values():
            budget = Budget(
                max_per_minute=rule.max_per_minute,
                max_cost_per_day=rule.max_cost_per_day,
                max_per_day=rule.budget_per_day,  # a budget is a cap, not an average
            )
            if rule.max_cost_per_day is not None:
                budget.seed(self.store.results_cost_since(rule=rule.name, since=day_start))
            if rule.budget_per_day is not None:
                budget.seed_count(self._results_today(rule, day_start), now)
            self.budgets[rule.name] = budget

    def _results_today(self, rule: Rule, day_start: float) -> int:
        """The rule's results since ``day_start``: what a restart resumes the daily cap from
        (jobs queued but not done yet are not counted)."""
        summary = getattr(self.store, "summary_sums", None)
        if summary is None:
            return 0
        sums = summary(since=day_start, rule=rule.name)
        return sum(s.scored + s.errors + s.skipped for s in sums.values())

    def record_cost(self, rule: str, cost: float, now: float) -> None:
        """Charge a finished evaluation's judge cost to its rule's daily budget."""
        budget = self.budgets.get(rule)
        if budget is not None:
            budget.record(cost, now)

    def plan(
        self,
        report: TickReport,
        *,
        now: float,
        settle_seconds: float,
        idle_seconds: float,
        max_delay_seconds: float | None = None,
    ) -> None:
        """Plan every settled trace and idle conversation, a page at a time (planned ids drop
        out of the next page, so a backlog never waits a whole interval per page)."""
        while not self._stopping.is_set():
            more = self.plan_page(
                report,
                now=now,
                settle_seconds=settle_seconds,
                idle_seconds=idle_seconds,
                max_delay_seconds=max_delay_seconds,
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
        max_delay_seconds: float | None = None,
    ) -> bool:
        """Plan at most ``limit`` settled traces, ``limit`` busy ones (unplanned spans waiting
        longer than ``max_delay_seconds``; None: no bound) and ``limit`` idle conversations,
        oldest first: the bounded step the monitor takes between job claims. True when a page
        was full (more may be waiting)."""
        traces = self.store.settled_traces(settle_seconds=settle_seconds, now=now, limit=limit)
        self.plan_traces(traces, report, now, arrived_before=now - settle_seconds)
        busy: list[str] = []
        if max_delay_seconds is not None:  # after the settled ones: those are marked by now
            busy = self.store.busy_traces(max_delay_seconds=max_delay_seconds, now=now, limit=limit)
            self.plan_traces(busy, report, now, busy_since=now - settle_seconds)
        # without a conversation rule they are still marked planned, so they do not count as
        # backlog forever
        conversations = self.store.idle_conversations(
            idle_seconds=idle_seconds, now=now, limit=limit
        )
        held = self.plan_conversations(
            conversations, report, now, arrived_before=now - idle_seconds
        )
        # a page of conversations all left for later (their jobs are running) is not more work
        full = len(traces) >= limit or len(busy) >= limit
        return full or (len(conversations) >= limit and held < limit)

    def plan_traces(
        self,
        trace_ids: Sequence[str],
        report: TickReport,
        now: float,
        *,
        arrived_before: float | None = None,
        every_target: bool = False,
        busy_since: float | None = None,
    ) -> None:
        """Plan these traces, a page at a time: each page's spans are read a chunk of traces at
        a time, and its jobs and its "planned" marks are written in one transaction.
        ``arrived_before``: the settle cutoff the ids were read with (a trace that got a span
        since is left to settle again). ``every_target`` (backfill): a trace that got late
        spans is planned for all its targets, not only theirs. ``busy_since``: the traces are
        busy ones, not marked planned; spans that arrive from this time on are planned again
        as late (see :meth:`~spanjudge._store.sql.SpanStore.enqueue_planned`)."""
        for start in range(0, len(trace_ids), PAGE):
            page = trace_ids[start : start + PAGE]
            self._plan_trace_page(page, report, now, arrived_before, every_target, busy_since)
        self.coverage.flush()

    def _plan_trace_page(
        self,
        page: Sequence[str],
        report: TickReport,
        now: float,
        arrived_before: float | None,
        every_target: bool,
        busy_since: float | None = None,
    ) -> None:
        specs: list[JobSpec] = []
        late = self.store.late_spans(page)
        counts = LateCounts()
        # read even with conversation rules alone: a conversation whose turns no dialect
        # reads would otherwise never appear, and nothing would say why
        if self.rules:
            planned = self.store.planned_targets(page)
            for start in range(0, len(page), LOAD_CHUNK):
                chunk = page[start : start + LOAD_CHUNK]
                by_trace = load_traces(self.store, chunk)
                for trace_id in chunk:
                    before, spans = len(specs), by_trace.get(trace_id, [])
                    since = None if every_target else late_among(spans, late.get(trace_id))
                    self._plan_trace(
                        spans, specs, report, now, planned, since, settled=busy_since is None
                    )
                    if since is not None:
                        counts.trace(trace_id, since, targets=len(specs) - before)
        if busy_since is None:
            report.jobs_enqueued += self.store.enqueue_planned(
                specs, traces=page, now=now, arrived_before=arrived_before, replanned=sorted(late)
            )
        else:
            report.jobs_enqueued += self.store.enqueue_planned(
                specs, busy=page, busy_since=busy_since, now=now
            )
            report.busy_traces += len(page)
        report.planned_traces += len(page)
        report.replanned_traces += counts.traces
        report.late_spans += counts.spans
        report.late_targets += counts.targets
        self._late(counts)

    def _late(self, counts: LateCounts) -> None:
        self.late.add(counts)
        self._late_log.add(counts)

    def _plan_trace(
        self,
        spans: list[SpanRecord],
        specs: list[JobSpec],
        report: TickReport,
        now: float,
        planned: set[tuple[str, str, str]],
        late: set[str] | None,
        *,
        settled: bool = True,
    ) -> None:
        """Plan one trace's targets. ``planned``: (rule, target) pairs that have a job already
        (passed over); ``late``: when the trace is planned again, the spans that came after
        the first time: only targets among them are looked at, and only they are counted.
        ``settled``: False for a busy trace, whose spans are not all there yet: a rule that
        finds no target in them is not counted or said to (its target may come later)."""
        tree: SpanTree | None = None
        reasons: list[tuple[Rule, str | None]] = []
        for rule in self.rules.values():
            if rule.target == "conversation":
                continue
            # a target's conversation is looked up only once its sampler keeps it (the lookup
            # reads the span's content through the dialects; most targets are not sampled)
            targets = among(find_targets(rule, spans, conversations=False), late)
            for target in targets:
                if (rule.name, target.target_type, target.target_id) in planned:
                    continue  # planned before (its one job stands): no sampling, no budget
                if rule.sample_by == "conversation":  # its conversation decides: look it up
                    target = with_conversation(target, tree := tree or target_tree(spans))
                rate = self._sampled(rule, target, report, spans, now)
                if rate is None:
                    continue
                if tree is None:
                    tree = target_tree(spans)
                spec = self.admit(rule, with_conversation(target, tree), report, now, rate)
                if spec is not None:
                    specs.append(spec)
            every = targets
            if rule.filter is not None:
                # spans of the rule's kind its filter turned away, counted like the
                # conversations a conversation rule's filter refuses
                every = among(
                    find_targets(rule, spans, apply_filter=False, conversations=False), late
                )
                if len(every) > len(targets):
                    self.skip(rule, "filtered", report, len(every) - len(targets))
            if late is None:  # planned again: why a rule found nothing was said the first time
                reason = (
                    None
                    if targets
                    else no_target_reason(rule, spans, found=targets, unfiltered=every)
                )
                reasons.append((rule, reason))
        if late is not None:
            self.coverage.trace([s for s in spans if s.span_id in late], reasons)
            return
        reasons.extend(
            (rule, no_target_reason(rule, spans))
            for rule in self.rules.values()
            if rule.target == "conversation"
        )
        self.coverage.trace(spans, reasons if settled else [])

    def plan_conversations(
        self,
        conversation_ids: Sequence[str],
        report: TickReport,
        now: float,
        *,
        arrived_before: float | None = None,
    ) -> int:
        """Plan these conversations; each page's jobs and marks are written in one transaction.
        A conversation judged before is judged again when its turns changed since (its job
        redone, the earlier result kept as superseded); one whose job is running now is left
        unplanned, to be looked at again next pass. Returns how many were left so."""
        conv_rules = [r for r in self.rules.values() if r.target == "conversation"]
        held_total = 0
        for start in range(0, len(conversation_ids), PAGE):
            page = conversation_ids[start : start + PAGE]
            specs: list[JobSpec] = []
            redos: list[Redo] = []
            held: set[str] = set()
            jobs = (
                self.store.conversation_jobs(page, rules=[r.name for r in conv_rules])
                if conv_rules
                else {}
            )
            for conversation_id in page if conv_rules else ():
                spans = load_conversation(self.store, conversation_id)
                target = conversation_target(conversation_id, spans)
                if target is None:
                    for rule in conv_rules:
                        self.coverage.conversation(rule, "no_turns", conversation_id, spans)
                    continue
                tree = target_tree(spans)  # trajectory filters read the turns' trees
                for rule in conv_rules:
                    job = jobs.get((rule.name, conversation_id))
                    if job is not None and job.state == LEASED:
                        # being judged, maybe without the latest turns: look again next pass
                        held.add(conversation_id)
                        continue
                    if job is not None and (job.state == PENDING or covers(job.result, target)):
                        continue  # it reads every turn when it runs, or it saw them all
                    if not rule.matches(target, tree):
                        self.skip(rule, "filtered", report)
                        self.coverage.conversation(rule, "filtered", conversation_id, spans)
                        continue
                    rate = self._sampled(rule, target, report, spans, now)
                    if rate is None:
                        continue
                    spec = self.admit(rule, target, report, now, rate)
                    if spec is None:
                        continue
                    if job is None:
                        specs.append(spec)
                        continue
                    # judged before, and turns came since: judged again over all of them
                    logger.debug("conversation %s judged again", log_text(conversation_id))
                    redos.append(Redo(job.job_id, "new_turns", spec.trace_id, spec.span_id))
            rejudged = self.store.redo_jobs(redos, now=now) if redos else 0
            marked = [c for c in page if c not in held]
            report.jobs_enqueued += self.store.enqueue_planned(
                specs, conversations=marked, now=now, arrived_before=arrived_before
            )
            report.planned_conversations += len(marked)
            report.rejudged_conversations += rejudged
            held_total += len(held)
            self._late(LateCounts(conversations=rejudged))
        self.coverage.flush()
        return held_total

    def _sampled(
        self,
        rule: Rule,
        target: Target,
        report: TickReport,
        spans: Sequence[SpanRecord],
        now: float,
    ) -> float | None:
        """The probability ``target`` was sampled with, or None (counted as not sampled)."""
        rate = (
            self.allocation.probability(rule, target, spans, now)
            if rule.has_target
            else rule.sample_rate
        )
        if target_kept(rule, target, rate):
            return rate
        self.skip(rule, "not_sampled", report)
        return None

    def admit(
        self, rule: Rule, target: Target, report: TickReport, now: float, rate: float
    ) -> JobSpec | None:
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
            sample_rate=rate,
        )

    def skip(self, rule: Rule, reason: str, report: TickReport, count: int = 1) -> None:
        report.count_skip(reason, count)
        if self.telemetry is not None:
            self.telemetry.record_skip(rule.name, reason, count)
