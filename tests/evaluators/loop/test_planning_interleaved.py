"""Planning never stops the jobs, and a slow evaluation never holds up what settles meanwhile.

* A backlog of settled traces is planned a bounded page at a time, with jobs claimed between the
  pages (a tick used to plan its whole backlog before running any job: evaluations stopped for up
  to 110 s while 125k traces waited); every trace is still planned and every job run once.
* While a slow evaluation runs, a trace that settles meanwhile is planned and evaluated in the
  same tick (a tick used to last as long as its slowest evaluation, and what settled waited for
  the next one).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop import monitor as monitor_module
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import observe


@observe(kind="agent", name="support")
def agent(question: str) -> str:
    return f"Answer to {question}"


def bias_monitor(
    server: ScriptedJudgeServer,
    store: SpanStore,
    clock: Any,
    *,
    interval_seconds: float = 0.05,
    after_tick: Any = None,
) -> Monitor:
    """A bias rule on agent spans, two evaluation slots, traces settled after 10 s."""
    return Monitor(
        [Rule(BiasMetric(model=server.judge()), target="agent", name="bias")],
        store=store,
        clock=clock,
        after_tick=after_tick,
        config=MonitorConfig(
            interval_seconds=interval_seconds,
            settle_seconds=10,
            retention_seconds=None,
            concurrency=2,
        ),
    )


def test_a_backlog_is_planned_a_page_at_a_time_with_jobs_claimed_in_between(
    app: Any, store: SpanStore, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = 7
    monkeypatch.setattr(monitor_module, "PLAN_STEP", step)
    events: list[tuple[str, int]] = []
    settled = store.settled_traces
    claim = store.claim_jobs

    def settled_traces(**kwargs: Any) -> list[str]:
        found = settled(**kwargs)
        events.append(("plan", len(found)))
        assert kwargs["limit"] <= step, "a planning step larger than the bound"
        return found

    def claim_jobs(**kwargs: Any) -> Any:
        jobs = claim(**kwargs)
        events.append(("claim", len(jobs)))
        return jobs

    monkeypatch.setattr(store, "settled_traces", settled_traces)
    monkeypatch.setattr(store, "claim_jobs", claim_jobs)
    with ScriptedJudgeServer() as server:
        server.add_rule(lambda request: {"opinions": []}, schema="Opinions")
        turns = 5 * step + 3
        for i in range(turns):
            agent(f"question {i}")
        app.flush()
        clock.advance(30)
        mon = bias_monitor(server, store, clock, interval_seconds=30.0)
        try:
            report = mon.tick()
        finally:
            mon.close()

    planned = [n for kind, n in events if kind == "plan"]
    assert sum(planned) == turns and max(planned) == step
    first_claim = next(i for i, (kind, n) in enumerate(events) if kind == "claim" and n)
    last_page = max(i for i, (kind, n) in enumerate(events) if kind == "plan" and n)
    assert first_claim < last_page, "no job was claimed before the whole backlog was planned"
    # nothing lost, nothing twice
    assert report.planned_traces == turns and report.jobs_enqueued == turns
    assert report.claimed == turns and report.scored == turns
    assert store.stats(now=clock()).unplanned_traces == 0
    results = store.results(rule="bias")
    assert len(results) == turns and len({r.target_id for r in results}) == turns


def test_a_trace_that_settles_during_a_slow_evaluation_is_evaluated_in_the_same_tick(
    app: Any, store: SpanStore, clock: Any
) -> None:
    calls: list[str] = []
    second = threading.Event()
    released: list[bool] = []
    lock = threading.Lock()

    def opinions(request: Any) -> dict[str, list[str]]:
        with lock:
            calls.append(request.prompt)
            n = len(calls)
        if n == 1:
            # while the first evaluation runs, a new turn arrives and settles; the first one
            # answers only once the new turn has reached the judge
            agent("the question asked later")
            app.flush()
            clock.advance(30)
            released.append(second.wait(10))
        else:
            second.set()
        return {"opinions": []}

    with ScriptedJudgeServer() as server:
        server.add_rule(opinions, schema="Opinions")
        agent("the first question")
        app.flush()
        clock.advance(30)
        mon = bias_monitor(server, store, clock)
        try:
            report = mon.tick()
        finally:
            mon.close()

    assert released == [True], "the new turn waited for the slow evaluation to end"
    assert report.planned_traces == 2 and report.scored == 2
    assert sorted(r.status for r in store.results(rule="bias")) == ["scored", "scored"]


def test_a_planning_failure_lets_the_jobs_in_flight_finish_then_ends_the_tick(
    app: Any, store: SpanStore, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()
    broken = threading.Event()

    def opinions(request: Any) -> dict[str, list[str]]:
        started.set()
        broken.wait(10)  # answers once planning has failed
        return {"opinions": []}

    settled = store.settled_traces

    def settled_traces(**kwargs: Any) -> list[str]:
        if started.is_set():
            broken.set()
            raise RuntimeError("store gone")
        return settled(**kwargs)

    monkeypatch.setattr(store, "settled_traces", settled_traces)
    with ScriptedJudgeServer() as server:
        server.add_rule(opinions, schema="Opinions")
        agent("a question")
        app.flush()
        clock.advance(30)
        mon = bias_monitor(server, store, clock)
        try:
            with pytest.raises(RuntimeError, match="store gone"):
                mon.tick()
        finally:
            mon.close()
    # the evaluation in flight was not abandoned to its lease: its result is stored
    assert [r.status for r in store.results(rule="bias")] == ["scored"]
    assert store.stats(now=clock()).leased == 0


def test_a_busy_tick_recovers_and_runs_after_tick_every_interval(
    app: Any, store: SpanStore, clock: Any
) -> None:
    # enrich mode releases held spans in after_tick: a tick kept busy by a long evaluation
    # must still call it, as the ticks it stands for would have
    after: list[float] = []
    done = threading.Event()

    def opinions(request: Any) -> dict[str, list[str]]:
        done.wait(10)  # answers once after_tick ran a few times meanwhile
        return {"opinions": []}

    def after_tick() -> None:
        after.append(clock())
        if len(after) >= 3:
            done.set()

    with ScriptedJudgeServer() as server:
        server.add_rule(opinions, schema="Opinions")
        agent("a question")
        app.flush()
        clock.advance(30)
        mon = bias_monitor(server, store, clock, after_tick=after_tick)
        try:
            report = mon.tick()
        finally:
            mon.close()
    assert done.is_set(), "after_tick did not run while the tick was busy"
    assert report.scored == 1 and len(after) >= 4  # three while busy, one at the end
