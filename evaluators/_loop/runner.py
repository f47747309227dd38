"""Running: claimed jobs become results, each stored once and then handed to the emitter.

For each job: rebuild the test case from the stored spans, measure it with a fresh copy of the
rule's metric (or reuse the judge-result cache's answer to the same question, see
:mod:`~spanjudge.evaluators._loop.result_cache`), store the result (only while the lease is
still ours), then emit it and count it. The monitor runs the store side of a job (rebuilding, the
cache, storing, emitting) on its store thread and only the judge calls on the event loop.
A transient judge failure (timeout, 429, 5xx, connection) gives the job back for a later tick
until ``max_attempts``, attempt n waiting ``n * retry_delay_seconds`` (at most
``retry_max_delay_seconds``): by default 30 s, 60 s, ... 5 min apart, about half an hour in all,
so a provider incident ends in scores rather than errors (:func:`retry_window`). Anything else is
recorded at once. A judge that stops answering is logged once and counted
(:mod:`~spanjudge.evaluators._loop.outage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from tenacity import wait_incrementing
from tenacity.wait import wait_base

from spanjudge._core.backoff import delay_after
from spanjudge._core.log_text import log_text
from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge._store.models import Job
from spanjudge._store.sql import SpanStore
from spanjudge.errors import StoreError
from spanjudge.evaluators._judge.judges.judge_trace import JudgeTrace, tracing
from spanjudge.evaluators._loop.batch_spans import BatchSpans, by_id
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.outage import TRANSIENT_ERRORS, JudgeHealth
from spanjudge.evaluators._loop.result_cache import ResultCache, cache_key, reuse
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.loading import load_conversation, load_trace
from spanjudge.evaluators._rebuild.targets import (
    Skip,
    Target,
    conversation_target,
    find_targets,
)
from spanjudge.evaluators._review.segments import result_segments
from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture

if TYPE_CHECKING:
    from spanjudge._core.telemetry import Telemetry
    from spanjudge.exporters._emit.emitter import Emitter

logger = logging.getLogger("spanjudge.monitor")

T = TypeVar("T")
# Runs a blocking call (a store read or write, an emit) away from the judge calls' event loop;
# the monitor passes one that hands it to its store thread.
Offload = Callable[[Callable[[], T]], Awaitable[T]]


async def inline(call: Callable[[], T]) -> T:
    """The :data:`Offload` that runs the call on the event loop itself."""
    return call()


__all__ = ["Runner", "retry_wait", "retry_window"]


def retry_wait(config: MonitorConfig) -> wait_base:
    """The job retry schedule: attempt n waits ``n * retry_delay_seconds`` after the last, at
    most ``retry_max_delay_seconds``."""
    delay = config.retry_delay_seconds
    return wait_incrementing(start=delay, increment=delay, max=config.retry_max_delay_seconds)


def retry_window(config: MonitorConfig) -> float:
    """Seconds from a job's first failed attempt to its last: how long a judge may be down
    before evaluations are recorded as errors (32.5 min with the defaults).

    Example::

        retry_window(MonitorConfig(max_attempts=3, retry_delay_seconds=30))  # 90.0
    """
    wait = retry_wait(config)
    return sum(delay_after(wait, attempt) for attempt in range(1, config.max_attempts))


class Runner:
    """Evaluates claimed jobs; see the module docstring.

    Example::

        runner = Runner(rules, store, planner, config=MonitorConfig(), owner="w1", clock=time.time)
        asyncio.run(runner.run(jobs, report))
    """

    def __init__(
        self,
        rules: Mapping[str, Rule],
        store: SpanStore,
        planner: Planner,
        *,
        config: MonitorConfig,
        owner: str,
        clock: Callable[[], float],
        emitter: Emitter | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.rules = rules
        self.store = store
        self.planner = planner
        self.config = config
        self.owner = owner
        self.clock = clock
        self.emitter = emitter
        self.telemetry = telemetry
        # attempt n waits n * retry_delay_seconds, capped: a judge that is down gets room
        self._wait = retry_wait(config)
        self.health = JudgeHealth(clock=clock, retry_window=retry_window(config))
        self.cache = (
            ResultCache(store, max_age_seconds=config.judge_cache_max_age_seconds)
            if config.judge_cache and isinstance(store, SpanStore)
            else None
        )
        # judge calls in flight, each with its loop (abandon() cancels them from another thread)
        self._in_flight: dict[asyncio.Task[Any], asyncio.AbstractEventLoop] = {}
        self._in_flight_lock = threading.Lock()
        self._abandoned = threading.Event()
        # judge tracing: the emitter's span output takes the judge's own trace (emitter.py)
        self._emit_judge_trace = (
            getattr(emitter, "emit_judge_trace", None)
            if config.judge_tracing and emitter is not None and "span" in emitter.outputs
            else None
        )

    def _judge_trace(self, rule: Rule) -> JudgeTrace | None:
        """A judge trace for the evaluation about to run, when judge tracing samples it."""
        if self._emit_judge_trace is None:
            return None
        rate = self.config.judge_trace_sample_rate
        if rate < 1 and random.random() >= rate:
            return None
        return JudgeTrace(
            rule.metric.name,
            capture_content=self.config.judge_trace_content and capture.POLICY.content,
            max_calls=self.config.judge_trace_max_calls,
        )

    def abandon(self) -> int:
        """Cancel the judge calls in flight and any that would start (a shutdown whose grace
        period ran out): each job is given back as it was, for the next start. Returns how
        many calls were cancelled. Final: the runner judges nothing afterwards."""
        self._abandoned.set()
        with self._in_flight_lock:
            calls = list(self._in_flight.items())
        for task, loop in calls:
            loop.call_soon_threadsafe(task.cancel)
        return len(calls)

    @contextlib.contextmanager
    def _judging(self) -> Iterator[None]:
        """Registers the running task's judge call so :meth:`abandon` can cancel it."""
        task = asyncio.current_task()
        if task is not None:
            with self._in_flight_lock:
                self._in_flight[task] = asyncio.get_running_loop()
        try:
            if self._abandoned.is_set():  # after registering: abandon() cannot slip between
                raise asyncio.CancelledError
            yield
        finally:
            if task is not None:
                with self._in_flight_lock:
                    self._in_flight.pop(task, None)

    async def run(self, jobs: Sequence[Job], report: TickReport) -> None:
        """Run ``jobs``, at most ``config.concurrency`` at once."""
        limit = asyncio.Semaphore(self.config.concurrency)

        shared = BatchSpans(jobs)

        async def run(job: Job) -> None:
            async with limit:
                await self.run_job(job, report, shared=shared)

        await asyncio.gather(*(run(job) for job in jobs))

    async def run_job(
        self,
        job: Job,
        report: TickReport,
        io: Offload[Any] = inline,
        *,
        shared: BatchSpans | None = None,
    ) -> None:
        """Evaluate one claimed job in three steps: :meth:`prepare` and :meth:`finish` (the
        store, the emit, the budget) go through ``io``; the judge calls between them stay on
        the running loop. ``shared`` holds the traces of the job's claim batch, each loaded
        once for all its jobs."""
        rule = self.rules.get(job.rule)
        started = self.clock()
        judge_trace: JudgeTrace | None = None
        if rule is None:
            # a rule removed since the job was planned: release it for a process that has it
            retry_at = started + self.config.interval_seconds
            await io(
                partial(self.store.release_job, job.job_id, owner=self.owner, retry_at=retry_at)
            )
            return
        try:
            record, case, key = await io(partial(self.prepare, rule, job, started, shared))
        except StoreError as exc:
            # the store failed, not the job's spans: give the job back for a later tick rather
            # than record it as skipped (a failure to give it back ends the tick; its lease
            # then expires and another tick takes it)
            logger.warning("could not load spans for job %s, retrying later: %s", job.job_id, exc)
            retry_at = self.clock() + self.config.interval_seconds
            await io(
                partial(self.store.release_job, job.job_id, owner=self.owner, retry_at=retry_at)
            )
            report.retried += 1
            return
        if case is None:
            report.missing += 1
        elif record.cached:
            report.scored += 1
        else:
            metric = rule.metric.clone()
            judge_trace = self._judge_trace(rule)
            try:
                # a failing judge leaves its error on the metric; to_data() carries it
                with self._judging(), tracing(judge_trace), contextlib.suppress(Exception):
                    await metric.a_measure(case)
            except asyncio.CancelledError:
                if not self._abandoned.is_set():
                    raise
                # the worker's grace period ran out: the job goes back untouched, for the
                # next start (its lease ends now, not lease_seconds later)
                await io(partial(self.store.release_job, job.job_id, owner=self.owner))
                report.retried += 1
                return
            fill_from_metric(record, metric.to_data())
            if judge_trace is not None and judge_trace.calls:
                record.judge_trace_id, record.judge_span_id = judge_trace.ids
            else:
                judge_trace = None
            retried = record.status == "error" and await io(partial(self._retry_later, job, record))
            self.health.observe(record, retried=retried)
            if retried:
                report.retried += 1
                return
            if record.status == "error":
                report.errors += 1
            else:
                report.scored += 1
        record.finished_at = self.clock()
        finish = partial(self.finish, rule, job, record, key, judge_trace=judge_trace)
        if not await io(finish):
            # our lease expired and another evaluator took the job: its result is the one kept
            report.lost_lease += 1

    def prepare(
        self, rule: Rule, job: Job, started: float, shared: BatchSpans | None = None
    ) -> tuple[EvaluationRecord, Any | None, str | None]:
        """A job's record, its rebuilt case (None when it cannot be rebuilt: the record then
        says why it was skipped) and its judge-cache key. On a cache hit the record already
        holds the reused outcome (``record.cached``) and no judge call is needed."""
        try:
            spans, target = self.load_target(job, shared)
        except StoreError:
            raise  # the store, not a row: run_job gives the job back
        except Exception as exc:  # a broken store row must not stop the other jobs
            # the message may quote a stored (received) value: escaped and cut
            logger.warning("could not load spans for job %s: %s", job.job_id, log_text(exc))
            spans, target = [], None
        record = new_record(rule, job, target, started)
        # a redone job (retry_errors, new_turns) gets an evaluation span id of its own: one per
        # result the target had before. A redone job keeps its id, so its earlier results are
        # found by the job_id index (0.007 ms; by rule and target it scanned the rule's rows:
        # 28 ms with 100,000 superseded on SQLite, measured)
        record.revision = len(self.store.superseded_results(job_id=job.job_id, limit=MAX_REVISIONS))
        if target is None:
            mark_skipped(record, "target spans not found in the store (deleted by retention?)")
            return record, None, None
        case = build_case(rule, target, spans)
        if isinstance(case, Skip):
            mark_skipped(record, case.reason)
            record.error_type = case.error_type  # implausible_field: the gate refused a field
            return record, None, None
        source = case.metadata.get("context_source") if case.metadata else None
        record.context_source = source if isinstance(source, str) else None
        if self.cache is None:
            return record, case, None
        try:
            key = cache_key(rule.metric, case)
        except Exception as exc:  # an odd parameter must not stop the evaluation
            logger.warning("no judge cache key for rule %s: %s", rule.name, log_text(exc))
            return record, case, None
        if key is not None:
            hit = self.cache.lookup(key, now=self.clock())
            if hit is not None:
                reuse(record, hit)
                if self.telemetry is not None:
                    self.telemetry.record_cache_hit(rule.name, record.metric)
        return record, case, key

    def finish(
        self,
        rule: Rule,
        job: Job,
        record: EvaluationRecord,
        key: str | None,
        *,
        judge_trace: JudgeTrace | None = None,
    ) -> bool:
        """Keep a new score in the judge cache, charge its cost, store the result while the
        lease is ours, then emit and count it. False when the lease was lost (nothing stored)."""
        if key is not None and self.cache is not None:
            self.cache.remember(key, record, now=self.clock())
        if record.status == "scored" and record.cost:
            self.planner.record_cost(rule.name, record.cost, self.clock())
        assert record.finished_at is not None
        if not self.store.complete_job(
            job.job_id, owner=self.owner, record=record, now=record.finished_at
        ):
            return False
        if self.emitter is not None:
            self.emitter.emit(record, job.job_id)
            if judge_trace is not None and self._emit_judge_trace is not None:
                self._emit_judge_trace(record, judge_trace)
        if self.telemetry is not None:
            self.telemetry.record_evaluation(record)
        return True

    def _retry_later(self, job: Job, record: EvaluationRecord) -> bool:
        """Give a transiently failed job back for a later attempt; False when it is final."""
        if record.error_type not in TRANSIENT_ERRORS or job.attempts >= self.config.max_attempts:
            return False
        self.store.release_job(
            job.job_id,
            owner=self.owner,
            retry_at=self.clock() + delay_after(self._wait, job.attempts),
        )
        return True

    def load_target(
        self, job: Job, shared: BatchSpans | None = None
    ) -> tuple[list[SpanRecord], Target | None]:
        """The spans a job's case is rebuilt from, and its target among them (None if gone);
        with ``shared``, a trace and its targets are found once for the batch's jobs of it."""
        rule = self.rules[job.rule]
        if job.target_type == "conversation":
            spans = load_conversation(self.store, job.target_id)
            return spans, conversation_target(job.target_id, spans)
        if not job.trace_id:
            return [], None
        if shared is None:
            spans = load_trace(self.store, job.trace_id)
            targets = by_id(find_targets(rule, spans))
        else:
            spans, targets = shared.take(self.store, rule, job.trace_id)
        return spans, targets.get(job.target_id)


# Results of one target counted for its revision; a target redone more often than this shares
# its last evaluation span id (a conversation judged again after each of 10,000 new turns).
MAX_REVISIONS = 10_000


def new_record(rule: Rule, job: Job, target: Target | None, started: float) -> EvaluationRecord:
    """The result of ``job`` before its evaluation: who, what, where, when."""
    response_id = None
    if target is not None and target.span is not None:
        value = target.span.attributes.get(attrs.GEN_AI_RESPONSE_ID)
        response_id = value if isinstance(value, str) and value else None
    # a conversation's result hangs under the last turn judged, which is a later one than
    # planning saw when turns came meanwhile (planning tells a judged conversation by it)
    where = target if target is not None and job.target_type == "conversation" else job
    return EvaluationRecord(
        rule=rule.name,
        metric=rule.metric.name,
        target_type=job.target_type,
        target_id=job.target_id,
        trace_id=where.trace_id,
        span_id=where.span_id,
        sample_rate=job.sample_rate,
        service_name=target.service_name if target else None,
        response_id=response_id,
        target_end_unix_nano=target.end_unix_nano if target else None,
        segments=result_segments(target, getattr(rule, "segment_keys", ())),
        threshold=getattr(rule.metric, "threshold", None),
        strict_mode=bool(getattr(rule.metric, "strict_mode", False)),
        started_at=started,
    )


def mark_skipped(record: EvaluationRecord, reason: str) -> None:
    record.status = "skipped"
    record.skip_reason = reason
    record.error_type = "missing_field"


def fill_from_metric(record: EvaluationRecord, data: Any) -> None:
    """Copy a measured metric's outcome (``metric.to_data()``) onto ``record``."""
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
