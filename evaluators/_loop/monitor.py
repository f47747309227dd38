"""The online loop: settled targets in, scores out, each (rule, target) exactly once.

One tick (never two at once in a process):

1. re-queue jobs whose lease expired (a crashed or killed evaluator) and re-emit results that a
   crash or an outage left unsent, per output (:mod:`~spanjudge.exporters._delivery`);
2. plan: settled traces and idle conversations become job rows
   (:mod:`~spanjudge.evaluators._plan.planner`), a bounded page at a time;
3. run: claim jobs under a lease, rebuild and measure each case, store the result, emit it
   (:mod:`~spanjudge.evaluators._loop.runner`), planning again between claims (the next page
   of a backlog, or a new pass every interval), so a backlog never stops the jobs and a slow
   evaluation never holds up what settles meanwhile (:mod:`~spanjudge.evaluators._loop.drain`:
   the judge calls on an event loop, the store work on a thread beside it).

A result is written before it is emitted and a job is completed only by the lease holder, so a
process killed at any point loses nothing and scores nothing twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store import open_store
from spanjudge._store.models import Redo
from spanjudge._store.sql import SpanStore
from spanjudge.errors import ConfigError
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.drain import Drain
from spanjudge.evaluators._loop.runner import Runner
from spanjudge.evaluators._loop.schedule import every
from spanjudge.evaluators._plan.labels import LabelWatch
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.dialects.declared import Reader
from spanjudge.evaluators._rebuild.dialects.declared import install as install_readers
from spanjudge.exporters._delivery import Delivery

if TYPE_CHECKING:
    from spanjudge._core.telemetry import Telemetry
    from spanjudge.exporters._emit.emitter import Emitter

__all__ = ["Monitor", "monitor"]

logger = logging.getLogger("spanjudge.monitor")

# Settled traces (and idle conversations) planned per step between job claims: small enough
# that the judge calls in flight are not held up long (0.5-1 ms per demo trace on a shared core).
PLAN_STEP = 100


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Monitor:
    """Evaluates stored spans under a set of rules; see :func:`monitor` for the usual entry.

    ``config`` holds the loop's timing and retry settings (:class:`MonitorConfig`). ``clock``
    returns Unix seconds; tests pass a controllable one. ``tick()`` is synchronous and safe to
    call by hand (the scheduler calls it every ``config.interval_seconds``). ``after_tick`` runs
    at the end of every tick (enrich mode releases held spans there).
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        store: SpanStore | str | None = None,
        emitter: Emitter | None = None,
        telemetry: Telemetry | None = None,
        config: MonitorConfig | None = None,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
        after_tick: Callable[[], Any] | None = None,
        readers: Sequence[Reader | Mapping[str, Any]] | None = None,
    ) -> None:
        if not rules:
            raise ConfigError("monitor() needs at least one Rule")
        if readers is not None:  # checked before anything starts: a bad one is a ConfigError
            install_readers(readers)
        names = [r.name for r in rules]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigError(f"rule names must be unique; repeated: {', '.join(repeated)}")
        self.config = config or MonitorConfig()
        self.rules: dict[str, Rule] = {r.name: r for r in rules}
        self._owns_store = not isinstance(store, SpanStore)
        self.store: SpanStore = store if isinstance(store, SpanStore) else open_store(store)
        self.emitter = emitter
        self.telemetry = telemetry
        self.owner = owner or _default_owner()
        self.clock = clock
        self.after_tick = after_tick
        self._tick_lock = threading.Lock()
        self._stopping = threading.Event()
        self._scheduler: Any = None
        self.planner = Planner(
            self.rules, self.store, clock=clock, telemetry=telemetry, stopping=self._stopping
        )
        # a person's late fail label queues the targets a budget or precision rule passed over
        self.labels = (
            LabelWatch(self.planner, since=clock())
            if any(getattr(r, "has_target", False) for r in self.rules.values())
            else None
        )
        self.runner = Runner(
            self.rules,
            self.store,
            self.planner,
            config=self.config,
            owner=self.owner,
            clock=clock,
            emitter=emitter,
            telemetry=telemetry,
        )
        self.delivery = (
            Delivery(self.store, emitter, clock=clock, lease_seconds=self.config.lease_seconds)
            if emitter is not None
            else None
        )
        self._drainer = Drain(
            self.store,
            self.runner,
            self.config,
            owner=self.owner,
            clock=clock,
            stopping=self._stopping,
            plan_step=self._plan_step,
            rounds=self._rounds,
            confirm=self._confirm,
        )
        if telemetry is not None:
            telemetry.set_backlog_callback(self._backlog)

    # ------------------------------------------------------------------ scheduling
    def start(self, scheduler: str | None = None) -> Monitor:
        """Run :meth:`tick` every ``config.interval_seconds`` with APScheduler.

        ``scheduler="background"`` uses a daemon thread; ``"asyncio"`` schedules on the running
        event loop (FastAPI, aiohttp apps), each tick running in a worker thread so the store's
        blocking I/O never stalls the loop. By default: ``"asyncio"`` when called from inside a
        running loop, else ``"background"``. Ticks never overlap (a run that finds one in progress
        returns at once) and a slow tick does not pile up runs behind it: missed runs collapse
        into one (:func:`~spanjudge.evaluators._loop.schedule.every`).
        """
        if self._scheduler is not None:
            return self
        self._stopping.clear()
        self._scheduler = every(
            self._scheduled_tick,
            seconds=self.config.interval_seconds,
            kind=scheduler,
            job_id="spanjudge-monitor",
        )
        return self

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
        if self.delivery is not None:
            self.delivery.stalled.clear()  # one last full wait
            self.delivery.mark_confirmed(self.clock(), wait=timeout)

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
        # A tick under steady traffic lasts as long as there is work, planning and recovering
        # on its own every interval: a run that finds it in progress returns at once.
        if not self._tick_lock.acquire(blocking=False):
            return
        try:
            report = self._tick()
            logger.debug("tick: %s", report)
        except Exception:  # the scheduler thread must survive a broken store
            logger.exception("spanjudge monitor tick failed; retrying next interval")
        finally:
            self._tick_lock.release()

    # ------------------------------------------------------------------ the tick
    def tick(self) -> TickReport:
        """One pass: recover, plan and run, until nothing settled is left to plan and no job
        is left to run. Returns what it did.

        Planning is interleaved with the jobs: a page of settled traces at a time while a
        backlog remains, then a new pass every ``interval_seconds`` while jobs run, so jobs
        start while a backlog is planned and traces that settle during a long evaluation are
        planned and claimed without waiting for it. A tick that keeps finding work (steady
        traffic) also recovers expired leases, re-emits and runs ``after_tick`` every
        ``interval_seconds`` as a new tick would."""
        with self._tick_lock:
            return self._tick()

    def _tick(self) -> TickReport:
        report = TickReport()
        self._recover(report)
        self._drain(report, plan=True)
        self._after(report)
        return report

    def _recover(self, report: TickReport) -> None:
        """A tick's first step: expired leases back to pending, unsent results re-emitted."""
        config = self.config
        now = self.clock()
        report.requeued += self.store.requeue_expired(now=now)
        if self.labels is not None:
            self.labels.tick(report, now=now)
        if self.delivery is not None:
            report.reemitted += self.delivery.reemit(
                now, flush_timeout=config.flush_timeout_seconds
            )
            # human labels leave as events on their spans too
            self.delivery.reemit_feedback(now, flush_timeout=config.flush_timeout_seconds)

    def _after(self, report: TickReport) -> None:
        """A tick's last step: ``after_tick``, retention, the judge cache's pruning."""
        config = self.config
        if self.after_tick is not None:
            self.after_tick()
        if config.retention_seconds is not None:
            report.deleted_spans += self.store.delete_older_than(
                self.clock() - config.retention_seconds
            )
        if self.runner.cache is not None:
            self.runner.cache.prune(now=self.clock())

    def _plan_step(self, report: TickReport) -> bool:
        """One bounded planning step (a page); True when more may be waiting."""
        return self.planner.plan_page(
            report,
            now=self.clock(),
            settle_seconds=self.config.settle_seconds,
            idle_seconds=self.config.idle_seconds,
            limit=PLAN_STEP,
            max_delay_seconds=self.config.settle_delay_limit,
        )

    def backfill(
        self,
        *,
        since: float,
        until: float | None = None,
        progress: Callable[[int], None] | None = None,
        retry_errors: bool = False,
    ) -> TickReport:
        """Plan and evaluate stored traces and conversations that arrived since ``since``.

        Pairs already evaluated are not evaluated again (the store remembers every pair),
        unless ``retry_errors``: then every result that is an error, recorded since ``since``,
        is evaluated again (a judge outage longer than the retry schedule); the errored result
        is kept as superseded (``store.superseded_results()``), the new one is current.
        """
        report = TickReport()
        with self._tick_lock:
            now = self.clock()
            if retry_errors:
                errored = self.store.errored_job_ids(since=since, until=until or now)
                redos = [Redo(job_id, "retry_errors") for job_id in errored]
                report.retried_errors = self.store.redo_jobs(redos, now=now)
            traces, conversations = self.store.targets_since(since=since, until=until or now)
            self.planner.plan_traces(traces, report, now, every_target=True)
            self.planner.plan_conversations(conversations, report, now)
            self._drain(report, progress)
        return report

    def _drain(
        self,
        report: TickReport,
        progress: Callable[[int], None] | None = None,
        *,
        plan: bool = False,
    ) -> None:
        """Run jobs until none is left or stop() was called (planning between claims when
        ``plan``, as :meth:`tick` describes), then wait a bounded time for the outputs."""
        self._drainer.run(report, progress, plan=plan)
        if self.delivery is not None:
            self.delivery.mark_confirmed(self.clock(), wait=self.config.flush_timeout_seconds)

    def _rounds(self, report: TickReport) -> None:
        """What a new tick would do first, for a drain still busy an interval later."""
        self._after(report)
        self._recover(report)

    def _confirm(self) -> None:
        """After evaluations finished: send their scores now, mark what the outputs took."""
        if self.emitter is not None:
            self.emitter.force_flush(0)  # without waiting
        if self.delivery is not None:
            self.delivery.mark_confirmed(self.clock(), wait=0)

    # ------------------------------------------------------------------ queries
    def results(self, **query: Any) -> list[EvaluationRecord]:
        """Stored results, filtered like ``SpanStore.results`` (rule, metric, trace_id...)."""
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


def monitor(
    rules: Sequence[Rule],
    *,
    store: SpanStore | str | None = None,
    config: MonitorConfig | None = None,
    outputs: Collection[str] | None = None,
    emitter: Emitter | None = None,
    telemetry: Telemetry | None = None,
    readers: Sequence[Reader | Mapping[str, Any]] | None = None,
    start: bool = True,
) -> Monitor:
    """Evaluate production spans in the background and write the scores back into the traces.

    Without an ``emitter`` one is created that sends each result, in the forms ``outputs``
    names (``"span"``: the evaluation span; ``"event"``: the ``gen_ai.evaluation.result`` log
    event; both by default), over OTLP/HTTP to the standard ``OTEL_EXPORTER_OTLP_*`` endpoint.
    ``readers`` are declared readers (:class:`~spanjudge.Reader`, or mappings of the same keys)
    for spans the built-in dialects do not read, or read wrong; they replace any installed before.

    ::

        import spanjudge
        from spanjudge import FaithfulnessMetric, MonitorConfig, Rule
        from spanjudge._store import open_store
        from spanjudge.exporters._store_spans import store_span_processor

        store = open_store("sqlite:///spanjudge.db")
        processor = store_span_processor(store)
        spanjudge.configure(service_name="support-bot", span_processors=[processor])
        mon = spanjudge.monitor(
            [Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="llm", sample_rate=0.1)],
            store=store,
            config=MonitorConfig(interval_seconds=10),
        )
        ...
        mon.stop()
    """
    if emitter is None:
        from spanjudge._core.kinds import OUTPUTS
        from spanjudge.exporters._emit.emitter import ScoreEmitter

        emitter = ScoreEmitter(outputs=OUTPUTS if outputs is None else outputs)
    elif outputs is not None:
        raise ConfigError("pass outputs or an emitter, not both (the emitter has its outputs)")
    mon = Monitor(
        rules, store=store, config=config, emitter=emitter, telemetry=telemetry, readers=readers
    )
    return mon.start() if start else mon
