"""A drain: a tick's jobs run until none is left, the judge calls on an event loop and
everything else (store reads and writes, planning, emits) on one store thread beside it.

A job is claimed as soon as an evaluation slot frees, so one slow evaluation never holds the
other slots idle (waiting for a whole batch to finish cost a third of the judge's capacity with
1-2 calls per evaluation). A planning drain plans between claims: the next page while a backlog
remains, else a new pass every interval, and every interval what the next tick would have done
first (:class:`~spanjudge.evaluators._loop.monitor.Monitor` supplies those steps).

Why a store thread: on the event loop, the synchronous store calls stalled the judge answers
waiting to be read (26 ms per call on average in a worker, for a 100 ms judge). One thread runs
them one at a time, in the order they were asked for, as they ran on the loop before.

Example::

    drain = Drain(store, runner, config, owner="w1", clock=time.time, stopping=threading.Event(),
                  plan_step=plan_page, rounds=recover_and_prune, confirm=mark_sent)
    drain.run(report, plan=True)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._loop.batch_spans import BatchSpans
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.runner import Runner
from spanjudge.evaluators._plan.planner import TickReport

T = TypeVar("T")


@dataclass
class _Pace:
    """When a drain plans and recovers next (monotonic seconds; real time, not the monitor's
    clock: a pass is due every interval whatever that clock says)."""

    next_pass: float
    next_rounds: float
    backlog: bool  # a planning page found more waiting: plan again before anything else


class Drain:
    """Runs claimed jobs until none is left or ``stopping`` is set; see the module docstring.

    ``plan_step(report)`` plans one page and says whether more may be waiting; ``rounds(report)``
    does what a new tick would do first (recover, re-emit, prune); ``confirm()`` runs after
    evaluations finished (send their scores, mark what the outputs took). All three, and every
    store call of the jobs, run on the store thread.
    """

    def __init__(
        self,
        store: SpanStore,
        runner: Runner,
        config: MonitorConfig,
        *,
        owner: str,
        clock: Callable[[], float],
        stopping: threading.Event,
        plan_step: Callable[[TickReport], bool],
        rounds: Callable[[TickReport], None],
        confirm: Callable[[], None],
    ) -> None:
        self.store = store
        self.runner = runner
        self.config = config
        self.owner = owner
        self.clock = clock
        self.stopping = stopping
        self.plan_step = plan_step
        self.rounds = rounds
        self.confirm = confirm

    def run(
        self,
        report: TickReport,
        progress: Callable[[int], None] | None = None,
        *,
        plan: bool = False,
    ) -> None:
        """Drain the claimable jobs (planning between claims when ``plan``); a store failure
        ends it once the jobs in flight have finished, and is raised."""
        with ThreadPoolExecutor(1, thread_name_prefix="spanjudge-store") as store_thread:
            asyncio.run(self._pool(report, progress, plan, store_thread))

    async def _pool(
        self,
        report: TickReport,
        progress: Callable[[int], None] | None,
        plan: bool,
        store_thread: ThreadPoolExecutor,
    ) -> None:
        loop = asyncio.get_running_loop()

        def io(call: Callable[[], T]) -> asyncio.Future[T]:
            return loop.run_in_executor(store_thread, call)

        config = self.config
        running: set[asyncio.Task[None]] = set()
        started = time.monotonic()
        pace = _Pace(started, started + config.interval_seconds, backlog=plan)  # plan at once
        failed: BaseException | None = None
        while True:
            if plan and not self.stopping.is_set():
                try:
                    await io(partial(self._plan_and_recover, report, pace))
                except Exception as exc:
                    # a broken store: let the jobs in flight finish (their leases would
                    # otherwise wait to expire), claim nothing more, then end the tick with it
                    failed, plan, pace.backlog = exc, False, False
            free = config.concurrency - len(running)
            if free > 0 and failed is None and not self.stopping.is_set():
                jobs = await io(
                    partial(
                        self.store.claim_jobs,
                        owner=self.owner,
                        limit=min(free, config.batch_size),
                        lease_seconds=config.lease_seconds,
                        now=self.clock(),
                    )
                )
                report.claimed += len(jobs)
                shared = BatchSpans(jobs)  # the batch's jobs of one trace load it once
                running.update(
                    asyncio.create_task(self.runner.run_job(j, report, io, shared=shared))
                    for j in jobs
                )
            if not running:
                if plan and pace.backlog and not self.stopping.is_set():
                    continue  # jobs found none to run yet: plan the next page
                if failed is not None:
                    raise failed
                return
            timeout = None
            if plan and not self.stopping.is_set():
                timeout = 0.0 if pace.backlog else max(0.0, pace.next_pass - time.monotonic())
            done, running = await asyncio.wait(
                running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                # a job's store failure ends the tick like a planning one: the jobs in flight
                # finish first, and every task's outcome is read (an exception left unread in a
                # second task that failed at the same time would be logged as never retrieved)
                error = None if task.cancelled() else task.exception()
                if error is not None and failed is None:
                    failed, plan, pace.backlog = error, False, False
            if not done:
                continue
            await io(self.confirm)
            if progress is not None:
                progress(len(done))

    def _plan_and_recover(self, report: TickReport, pace: _Pace) -> None:
        """Between claims: the next planning page while a backlog remains (else a new pass
        every interval), and every interval what the next tick would have done first."""
        moment = time.monotonic()
        if pace.backlog or moment >= pace.next_pass:
            pace.backlog = self.plan_step(report)
            pace.next_pass = moment + self.config.interval_seconds
        if moment >= pace.next_rounds:
            # still busy an interval later: do what the next tick would have done
            self.rounds(report)
            pace.next_rounds = moment + self.config.interval_seconds
