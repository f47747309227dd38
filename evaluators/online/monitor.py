"""The online loop: settled targets in, scores out, each (rule, target) exactly once.

One tick (never two at once in a process):

1. re-queue jobs whose lease expired (a crashed or killed evaluator) and re-emit results that were
   stored but not emitted before a crash (same deterministic span id, so nothing is shown twice);
2. plan: settled traces and idle conversations become job rows, one per (rule, target) chosen by
   the rule's filter, its deterministic sampler and its budget; the store ignores a pair it has
   seen before, so planning twice is harmless;
3. run: claim jobs under a lease, rebuild each test case from the stored spans, measure with a
   fresh copy of the rule's metric, store the result (only while the lease is still ours), then
   emit the evaluation span, event and metric points.

A result is written before it is emitted and a job is completed only by the lease holder, so a
process killed at any point loses nothing and scores nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spanjudge.evaluators.online.rebuild import (
    Skip,
    Target,
    build_case,
    conversation_target,
    find_targets,
)
from spanjudge.evaluators.online.rules import Rule
from spanjudge.evaluators.online.sampler import Budget, is_sampled
from spanjudge.exporters.records import EvaluationRecord, SpanRecord
from spanjudge.exporters.store import Job, JobSpec, SpanStore, open_store

if TYPE_CHECKING:
    from spanjudge.exporters.emitter import ScoreEmitter
    from spanjudge.exporters.telemetry import Telemetry

logger = logging.getLogger("spanjudge.monitor")

# Judge failures worth another attempt in a later tick; anything else is recorded at once.
_TRANSIENT_ERRORS = frozenset(
    {"judge_timeout", "judge_rate_limited", "judge_connection", "judge_server_error"}
)


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


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Monitor:
    """Evaluates stored spans under a set of rules; see :func:`monitor` for the usual entry.

    ``clock`` returns Unix seconds; tests pass a controllable one. ``tick()`` is synchronous and
    safe to call by hand (the scheduler calls it every ``interval_seconds``).
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        store: SpanStore | str | None = None,
        emitter: ScoreEmitter | None = None,
        telemetry: Telemetry | None = None,
        interval_seconds: float = 30.0,
        settle_seconds: float = 10.0,
        idle_seconds: float = 300.0,
        concurrency: int = 8,
        lease_seconds: float = 300.0,
        max_attempts: int = 3,
        retry_delay_seconds: float = 30.0,
        retention_seconds: float | None = 7 * 24 * 3600,
        batch_size: int = 64,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
        after_tick: Callable[[], Any] | None = None,
        flush_timeout_seconds: float = 2.0,
    ) -> None:
        if not rules:
            raise ValueError("monitor() needs at least one Rule")
        names = [r.name for r in rules]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(duplicates)}")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.rules: dict[str, Rule] = {r.name: r for r in rules}
        self.store: SpanStore = store if isinstance(store, SpanStore) else open_store(store)
        self._owns_store = not isinstance(store, SpanStore)
        self.emitter = emitter
        self.telemetry = telemetry
        self.interval_seconds = interval_seconds
        self.settle_seconds = settle_seconds
        self.idle_seconds = idle_seconds
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.retry_delay_seconds = retry_delay_seconds
        self.retention_seconds = retention_seconds
        self.batch_size = batch_size
        self.owner = owner or _default_owner()
        self.clock = clock
        self.after_tick = after_tick
        self.flush_timeout_seconds = flush_timeout_seconds
        self._emit_stalled = False  # the last flush timed out: do not wait again until it drains
        self._tick_lock = threading.Lock()
        self._stopping = threading.Event()
        self._scheduler: Any = None
        self._budgets: dict[str, Budget] = {}
        now = clock()
        day_start = now - (now % 86400)
        for rule in rules:
            budget = Budget(
                max_per_minute=rule.max_per_minute, max_cost_per_day=rule.max_cost_per_day
            )
            if rule.max_cost_per_day is not None:
                budget.seed(self.store.results_cost_since(rule=rule.name, since=day_start))
            self._budgets[rule.name] = budget
        if telemetry is not None:
            telemetry.set_backlog_callback(self._backlog)

    # ------------------------------------------------------------------ scheduling
    def start(self, scheduler: str | None = None) -> Monitor:
        """Run :meth:`tick` every ``interval_seconds`` with APScheduler.

        ``scheduler="background"`` uses a daemon thread; ``"asyncio"`` schedules on the running
        event loop (FastAPI, aiohttp apps), each tick running in a worker thread so the store's
        blocking I/O never stalls the loop. By default: ``"asyncio"`` when called from inside a
        running loop, else ``"background"``. Ticks never overlap (``max_instances=1``) and a slow
        tick does not pile up runs behind it (``coalesce=True``): missed runs collapse into one.
        """
        if self._scheduler is not None:
            return self
        if scheduler is None:
            try:
                asyncio.get_running_loop()
                scheduler = "asyncio"
            except RuntimeError:
                scheduler = "background"
        self._stopping.clear()
        job: Callable[..., Any]
        if scheduler == "asyncio":
            from apscheduler.schedulers.asyncio import AsyncIOScheduler

            sched: Any = AsyncIOScheduler(event_loop=asyncio.get_running_loop())
            job = self._async_tick
        elif scheduler == "background":
            from apscheduler.schedulers.background import BackgroundScheduler

            sched = BackgroundScheduler(daemon=True)
            job = self._scheduled_tick
        else:
            raise ValueError(f"scheduler must be 'background' or 'asyncio', got {scheduler!r}")
        sched.add_job(
            job,
            "interval",
            seconds=self.interval_seconds,
            max_instances=1,
            coalesce=True,
            next_run_time=_utcnow(),  # first tick right away, not one interval after start
            id="spanjudge-monitor",
        )
        sched.start()
        self._scheduler = sched
        return self

    async def _async_tick(self) -> None:
        await asyncio.to_thread(self._scheduled_tick)

    async def a_stop(self, timeout: float = 30.0) -> None:
        """:meth:`stop` for async code: waits for the tick in flight without blocking the loop."""
        await asyncio.to_thread(self.stop, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop scheduling, let the tick in flight finish its claimed jobs, flush the emitter."""
        self._stopping.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
            self._scheduler = None
        # a tick started by hand on another thread: wait for it
        if self._tick_lock.acquire(timeout=timeout):
            self._tick_lock.release()
        self._emit_stalled = False  # one last full wait
        self._mark_confirmed(self.clock(), wait=timeout)

    def close(self) -> None:
        self.stop()
        if self.emitter is not None:
            self.emitter.shutdown()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _scheduled_tick(self) -> None:
        try:
            report = self.tick()
            logger.debug("tick: %s", report)
        except Exception:  # the scheduler thread must survive a broken store
            logger.exception("spanjudge monitor tick failed; retrying next interval")

    # ------------------------------------------------------------------ the tick
    def tick(self) -> TickReport:
        """One pass: recover, plan, run. Returns what it did."""
        report = TickReport()
        with self._tick_lock:
            now = self.clock()
            report.requeued = self.store.requeue_expired(now=now)
            self._reemit(report, now)
            self._plan(report, now)
            self._drain(report)
            if self.after_tick is not None:
                self.after_tick()
            if self.retention_seconds is not None:
                report.deleted_spans = self.store.delete_older_than(
                    self.clock() - self.retention_seconds
                )
        return report

    def backfill(
        self,
        *,
        since: float,
        until: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> TickReport:
        """Plan and evaluate stored traces and conversations that arrived since ``since``.

        Pairs already evaluated are not evaluated again (the store remembers every pair).
        """
        report = TickReport()
        with self._tick_lock:
            now = self.clock()
            traces, conversations = self.store.targets_since(since=since, until=until or now)
            self._plan_traces(traces, report, now)
            self._plan_conversations(conversations, report, now)
            self._drain(report, progress)
        return report

    def _drain(self, report: TickReport, progress: Callable[[int], None] | None = None) -> None:
        """Claim and run batches of jobs until none is left (or stop() was called)."""
        while not self._stopping.is_set():
            jobs = self.store.claim_jobs(
                owner=self.owner,
                limit=self.batch_size,
                lease_seconds=self.lease_seconds,
                now=self.clock(),
            )
            if not jobs:
                return
            report.claimed += len(jobs)
            asyncio.run(self._run_jobs(jobs, report))
            self._mark_confirmed(self.clock(), wait=self.flush_timeout_seconds)
            if progress is not None:
                progress(len(jobs))

    # ------------------------------------------------------------------ recovery
    def _reemit(self, report: TickReport, now: float) -> None:
        if self.emitter is None:
            return
        self._mark_confirmed(now, wait=0)  # what the exporter took since the last tick
        if self._emit_stalled and not self.emitter.force_flush(0):
            return  # the exporter is still stuck on earlier spans: re-sending would only drop
        self._emit_stalled = False
        pending = self.store.unemitted_results(limit=1000)
        # A live evaluator emits right after storing; only results older than a lease are
        # orphans of a crash or of a backend that was down (else we would race the process
        # that is about to emit them).
        stale = [
            (job_id, rec)
            for job_id, rec in pending
            if rec.finished_at is None or rec.finished_at <= now - self.lease_seconds
        ]
        for job_id, record in stale:
            self.emitter.emit(record, job_id)
        if stale:
            self._mark_confirmed(now, wait=self.flush_timeout_seconds)
        report.reemitted += len(stale)

    def _mark_confirmed(self, now: float, *, wait: float) -> int:
        """Mark emitted the results whose evaluation spans the exporter confirmed.

        ``emit()`` only queues; a result is marked emitted once the exporter took its span, so a
        process killed before the export, or a backend that refused it, leaves it unemitted and
        it is sent again (same span id) after a lease, by this or another process. ``wait``
        bounds how long a tick waits for the exporter: a slow or dead backend delays marking,
        never the evaluations.
        """
        if self.emitter is None:
            return 0
        if wait > 0:
            # while the exporter is stuck (a dead backend retrying), ticks do not wait on it
            # again; a flush that finds the queue drained ends that
            flushed = self.emitter.force_flush(0 if self._emit_stalled else wait)
            self._emit_stalled = not flushed
        confirmed = self.emitter.take_confirmed()
        if confirmed:
            self.store.mark_emitted(confirmed, now=now)
        return len(confirmed)

    # ------------------------------------------------------------------ planning
    def _plan(self, report: TickReport, now: float) -> None:
        # Page through everything that settled: a backlog larger than one page must not wait
        # a whole interval per page. Planned ids drop out of the next page.
        page = 500
        while not self._stopping.is_set():
            traces = self.store.settled_traces(
                settle_seconds=self.settle_seconds, now=now, limit=page
            )
            self._plan_traces(traces, report, now)
            if len(traces) < page:
                break
        while not self._stopping.is_set():
            # without a conversation rule they are still marked planned, so they do not count
            # as backlog forever
            conversations = self.store.idle_conversations(
                idle_seconds=self.idle_seconds, now=now, limit=page
            )
            self._plan_conversations(conversations, report, now)
            if len(conversations) < page:
                break

    def _plan_traces(self, trace_ids: Sequence[str], report: TickReport, now: float) -> None:
        span_rules = [r for r in self.rules.values() if r.target != "conversation"]
        for trace_id in trace_ids:
            if span_rules:
                spans = self.store.trace_spans(trace_id)
                specs: list[JobSpec] = []
                for rule in span_rules:
                    targets = find_targets(rule, spans)
                    for target in targets:
                        spec = self._admit(rule, target, report, now)
                        if spec is not None:
                            specs.append(spec)
                    if rule.filter is not None:
                        # spans of the rule's kind its filter turned away, counted like the
                        # conversations a conversation rule's filter refuses
                        every = find_targets(rule, spans, apply_filter=False)
                        if len(every) > len(targets):
                            self._skip(rule, "filtered", report, len(every) - len(targets))
                if specs:
                    report.jobs_enqueued += self.store.enqueue_jobs(specs, now=now)
            self.store.mark_planned(traces=[trace_id], now=now)
            report.planned_traces += 1

    def _plan_conversations(
        self, conversation_ids: Sequence[str], report: TickReport, now: float
    ) -> None:
        conv_rules = [r for r in self.rules.values() if r.target == "conversation"]
        for conversation_id in conversation_ids:
            if conv_rules:
                spans = self.store.conversation_spans(conversation_id)
                target = conversation_target(conversation_id, spans)
                specs = []
                if target is not None:
                    for rule in conv_rules:
                        if rule.matches(target):
                            spec = self._admit(rule, target, report, now)
                            if spec is not None:
                                specs.append(spec)
                        else:
                            self._skip(rule, "filtered", report)
                if specs:
                    report.jobs_enqueued += self.store.enqueue_jobs(specs, now=now)
            self.store.mark_planned(conversations=[conversation_id], now=now)
            report.planned_conversations += 1

    def _admit(self, rule: Rule, target: Target, report: TickReport, now: float) -> JobSpec | None:
        if not is_sampled(rule.name, target.target_id, rule.sample_rate):
            self._skip(rule, "not_sampled", report)
            return None
        refused = self._budgets[rule.name].allow(now)
        if refused is not None:
            self._skip(rule, refused, report)
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

    def _skip(self, rule: Rule, reason: str, report: TickReport, count: int = 1) -> None:
        report.count_skip(reason, count)
        if self.telemetry is not None:
            self.telemetry.record_skip(rule.name, reason, count)

    # ------------------------------------------------------------------ running
    async def _run_jobs(self, jobs: Sequence[Job], report: TickReport) -> None:
        limit = asyncio.Semaphore(self.concurrency)

        async def run(job: Job) -> None:
            async with limit:
                await self._run_job(job, report)

        await asyncio.gather(*(run(job) for job in jobs))

    async def _run_job(self, job: Job, report: TickReport) -> None:
        rule = self.rules.get(job.rule)
        started = self.clock()
        if rule is None:
            # a rule removed since the job was planned: release it for a process that has it
            self.store.release_job(
                job.job_id, owner=self.owner, retry_at=started + self.interval_seconds
            )
            return
        try:
            spans, target = self._load_target(job)
        except Exception as exc:  # a broken store row must not stop the other jobs
            logger.warning("could not load spans for job %s: %s", job.job_id, exc)
            spans, target = [], None
        record = EvaluationRecord(
            rule=rule.name,
            metric=rule.metric.name,
            target_type=job.target_type,
            target_id=job.target_id,
            trace_id=job.trace_id,
            span_id=job.span_id,
            sample_rate=job.sample_rate,
            service_name=target.service_name if target else None,
            target_end_unix_nano=target.end_unix_nano if target else None,
            threshold=getattr(rule.metric, "threshold", None),
            strict_mode=bool(getattr(rule.metric, "strict_mode", False)),
            started_at=started,
        )
        if target is None:
            _mark_skipped(record, "target spans not found in the store (deleted by retention?)")
            report.missing += 1
        else:
            case = build_case(rule, target, spans)
            if isinstance(case, Skip):
                _mark_skipped(record, case.reason)
                report.missing += 1
            else:
                metric = rule.metric.clone()
                # a failing judge leaves its error on the metric; to_data() carries it
                with contextlib.suppress(Exception):
                    await metric.a_measure(case)
                data = metric.to_data()
                _fill_from_metric(record, data)
                if record.status == "error":
                    if record.error_type in _TRANSIENT_ERRORS and job.attempts < self.max_attempts:
                        self.store.release_job(
                            job.job_id,
                            owner=self.owner,
                            retry_at=self.clock() + self.retry_delay_seconds * job.attempts,
                        )
                        report.retried += 1
                        return
                    report.errors += 1
                else:
                    report.scored += 1
                    if record.cost:
                        self._budgets[rule.name].record(record.cost, self.clock())
        record.finished_at = self.clock()
        if not self.store.complete_job(
            job.job_id, owner=self.owner, record=record, now=record.finished_at
        ):
            # our lease expired and another evaluator took the job: its result is the one kept
            report.lost_lease += 1
            return
        if self.emitter is not None:
            self.emitter.emit(record, job.job_id)
        if self.telemetry is not None:
            self.telemetry.record_evaluation(record)

    def _load_target(self, job: Job) -> tuple[list[SpanRecord], Target | None]:
        rule = self.rules[job.rule]
        if job.target_type == "conversation":
            spans = self.store.conversation_spans(job.target_id)
            return spans, conversation_target(job.target_id, spans)
        spans = self.store.trace_spans(job.trace_id) if job.trace_id else []
        for target in find_targets(rule, spans):
            if target.target_id == job.target_id:
                return spans, target
        return spans, None

    # ------------------------------------------------------------------ queries
    def results(self, **query: Any) -> list[EvaluationRecord]:
        """Stored results, filtered like :meth:`SpanStore.results` (rule, metric, trace_id...)."""
        return self.store.results(**query)

    def _backlog(self) -> Any:
        # Telemetry's backlog callback contract: ({state: count}, oldest age or None)
        stats = self.store.stats(now=self.clock())
        counts = {
            "pending": stats.pending,
            "leased": stats.leased,
            "failed": stats.failed,
            "unplanned_traces": stats.unplanned_traces,
            "unplanned_conversations": stats.unplanned_conversations,
            # enrich mode (0 otherwise): spans waiting for their scores / due to be forwarded
            "held_spans": stats.outbox_held,
            "unforwarded_spans": stats.outbox_due,
        }
        return counts, stats.oldest_pending_age_seconds


def _utcnow() -> Any:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def _mark_skipped(record: EvaluationRecord, reason: str) -> None:
    record.status = "skipped"
    record.skip_reason = reason
    record.error_type = "missing_field"


def _fill_from_metric(record: EvaluationRecord, data: Any) -> None:
    record.judge_model = data.judge_model
    record.input_tokens = data.input_tokens or 0
    record.output_tokens = data.output_tokens or 0
    record.cost = data.evaluation_cost
    record.judge_calls = data.judge_calls or 0
    record.threshold = data.threshold
    record.strict_mode = bool(data.strict_mode)
    record.verdicts = data.verdicts
    if data.error is not None or data.score is None:
        record.status = "error"
        record.error_type = data.error_type or "evaluation_error"
        record.error_message = data.error or "the metric produced no score"
        return
    record.status = "scored"
    record.score = float(data.score)
    record.success = bool(data.success)
    record.label = "pass" if record.success else "fail"
    record.reason = data.reason


def monitor(
    rules: Sequence[Rule],
    *,
    store: SpanStore | str | None = None,
    interval_seconds: float = 30.0,
    concurrency: int = 8,
    start: bool = True,
    **options: Any,
) -> Monitor:
    """Evaluate production spans in the background and write the scores back into the traces.

    ::

        import spanjudge
        from spanjudge.evaluators import FaithfulnessMetric, Rule

        spanjudge.configure(service_name="support-bot", store="sqlite:///spanjudge.db")
        mon = spanjudge.monitor(
            [Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="llm", sample_rate=0.1)],
            store="sqlite:///spanjudge.db",
        )
        ...
        mon.stop()

    ``options`` go to :class:`Monitor` (settle_seconds, idle_seconds, lease_seconds, emitter,
    telemetry, retention_seconds, clock, ...). Without an ``emitter`` one is created that sends
    evaluation spans over OTLP/HTTP to the standard ``OTEL_EXPORTER_OTLP_*`` endpoint.
    """
    if "emitter" not in options:
        from spanjudge.exporters.emitter import ScoreEmitter

        options["emitter"] = ScoreEmitter()
    mon = Monitor(
        rules, store=store, interval_seconds=interval_seconds, concurrency=concurrency, **options
    )
    return mon.start() if start else mon
