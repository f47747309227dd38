"""Busy traces get a bounded delay (issue 41, Low row), on SQLite and PostgreSQL: a trace that
gets a span every second never goes quiet for ``settle_seconds``, so it is planned once its
first unplanned span has waited ``max_settle_delay_seconds``; what comes after is planned as a
late arrival, and no target is judged twice. Quiet traces settle as before. Spans are written
straight into the store on a controlled clock, one tick a second."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.sql import SpanStore
from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.online.spans import Trace
from tests.support.clock import Clock
from tests.support.stores import BACKENDS, schema_name, stores_on

SETTLE = 10.0
MAX_DELAY = 15.0
BUSY_FOR = 30  # seconds, one LLM span each


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SpanStore]:
    with stores_on(str(request.param), tmp_path / "spans.db", schema_name()) as make:
        yield make()


def monitor(store: SpanStore, judge: Any, clock: Clock, **settings: Any) -> Monitor:
    config = MonitorConfig(settle_seconds=SETTLE, retention_seconds=None, **settings)
    rules = [
        Rule(BiasMetric(model=judge), target="llm", name="bias-llm"),
        Rule(BiasMetric(model=judge), target="agent", name="bias-agent"),
    ]
    return Monitor(rules, store=store, clock=clock, config=config)


def busy_trace(store: SpanStore, mon: Monitor, clock: Clock) -> tuple[list[SpanRecord], int]:
    """A span a second for BUSY_FOR seconds, a tick after each; the root (an agent turn) ends
    and arrives last. Returns the LLM spans and how many were judged while the trace was busy."""
    trace = Trace()
    root = trace.agent()
    llms = []
    judged = 0
    for i in range(BUSY_FOR):
        llm = trace.llm(f"Question {i}?", f"Answer {i}.", parent=root)
        store.write_spans([llm], now=clock())
        llms.append(llm)
        judged += mon.tick().scored
        clock.advance(1)
    store.write_spans([root], now=clock())
    return [root, *llms], judged


def judged_keys(store: SpanStore) -> list[tuple[str, str]]:
    return sorted((r.rule, r.target_id) for r in store.results())


def test_a_trace_with_a_span_every_second_is_judged_before_it_stops(
    store: SpanStore, offline_judge: ScriptedJudgeServer, clock: Clock
) -> None:
    mon = monitor(store, offline_judge.judge(), clock, max_settle_delay_seconds=MAX_DELAY)
    spans, judged_while_busy = busy_trace(store, mon, clock)
    root, llms = spans[0], spans[1:]
    assert judged_while_busy > 0, "judged while spans still came"
    # each span judged within the delay bound of its arrival: by the time the spans stop, all
    # but the last MAX_DELAY seconds' worth have a result
    assert judged_while_busy >= BUSY_FOR - MAX_DELAY - 1

    clock.advance(SETTLE + 1)
    mon.tick()  # the trace went quiet: the rest (and the root, the agent turn) settle
    expected = sorted([("bias-agent", root.span_id)] + [("bias-llm", llm.span_id) for llm in llms])
    assert judged_keys(store) == expected, "every target judged exactly once"
    assert all(r.status == "scored" for r in store.results())
    assert mon.planner.late.traces >= 1, "what came after the first plan went the late way"
    with store.transaction(write=False) as cur:
        cur.execute("SELECT COUNT(*) FROM superseded_results")
        assert cur.fetchone()[0] == 0, "nothing judged again"
        cur.execute("SELECT COUNT(*) FROM jobs")
        assert cur.fetchone()[0] == len(expected), "one job per target"

    clock.advance(1000)
    assert mon.tick().claimed == 0, "nothing planned twice"
    assert len(store.results()) == len(expected)


def test_with_the_default_a_quiet_trace_settles_as_before(
    store: SpanStore, offline_judge: ScriptedJudgeServer, clock: Clock
) -> None:
    mon = monitor(store, offline_judge.judge(), clock)
    assert mon.config.settle_delay_limit == 6 * SETTLE
    # a busy 30 s trace is within the default bound: judged once it goes quiet, as before
    spans, judged_while_busy = busy_trace(store, mon, clock)
    assert judged_while_busy == 0
    assert mon.tick().planned_traces == 0

    quiet = Trace()
    root = quiet.agent()
    llm = quiet.llm(parent=root)
    store.write_spans([llm, root], now=clock())
    clock.advance(SETTLE)  # settled at the cutoff, as before
    report = mon.tick()
    assert report.planned_traces == 2 and report.scored == len(spans) + 2
    assert report.replanned_traces == 0, "a quiet trace is planned once, not as late"
    assert {("bias-llm", llm.span_id), ("bias-agent", root.span_id)} <= set(judged_keys(store))


def test_a_rootless_busy_trace_is_planned_by_the_bound_too(
    store: SpanStore,
    offline_judge: ScriptedJudgeServer,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mon = monitor(store, offline_judge.judge(), clock, max_settle_delay_seconds=MAX_DELAY)
    trace = Trace()
    root = trace.agent()  # not sent yet: its children wait on the orphan rule otherwise
    first = trace.llm(parent=root)
    store.write_spans([first], now=clock())
    clock.advance(MAX_DELAY)
    assert mon.tick().scored == 0, "the bound is not reached at its cutoff"
    clock.advance(1)
    caplog.set_level(logging.WARNING, logger="spanjudge")
    report = mon.tick()
    assert (report.scored, report.busy_traces) == (1, 1)
    # the agent rule found no target yet: not said, the trace is not complete
    assert not [r for r in caplog.records if "bias-agent" in r.getMessage()]
    store.write_spans([root], now=clock())
    clock.advance(SETTLE + 1)
    report = mon.tick()
    assert (report.scored, report.late_targets) == (1, 1)
    assert judged_keys(store) == sorted([("bias-agent", root.span_id), ("bias-llm", first.span_id)])


def test_the_bound_is_checked_against_settle_seconds() -> None:
    below = r"MonitorConfig\.max_settle_delay_seconds: must be at least settle_seconds \(30\)"
    with pytest.raises(ConfigError, match=below):
        MonitorConfig(settle_seconds=30, max_settle_delay_seconds=10)
    with pytest.raises(ConfigError, match="max_settle_delay_seconds"):
        MonitorConfig(max_settle_delay_seconds=-1)
    assert MonitorConfig(settle_seconds=30, max_settle_delay_seconds=30).settle_delay_limit == 30
    assert MonitorConfig(settle_seconds=120).settle_delay_limit == 720


def test_late_spans_that_keep_coming_are_bounded_by_their_own_wait(
    store: SpanStore, offline_judge: ScriptedJudgeServer, clock: Clock
) -> None:
    """A trace planned once it settled, then late spans every second: the bound counts from
    the first late one (not the trace's first span, which would plan every tick)."""
    mon = monitor(store, offline_judge.judge(), clock, max_settle_delay_seconds=MAX_DELAY)
    trace = Trace()
    root = trace.agent()
    store.write_spans([trace.llm(parent=root), root], now=clock())
    clock.advance(SETTLE + 1)
    assert mon.tick().scored == 2
    busy_ticks = []
    for i in range(BUSY_FOR):
        store.write_spans([trace.llm(f"Late {i}?", "Late.", parent=root)], now=clock())
        report = mon.tick()
        if report.busy_traces:
            busy_ticks.append(i)
        clock.advance(1)
    # the first after MAX_DELAY seconds of waiting, then every MAX_DELAY - SETTLE seconds
    assert busy_ticks == [16, 22, 28]
    clock.advance(SETTLE + 1)
    mon.tick()
    assert len(store.results()) == 2 + BUSY_FOR
    assert len({(r.rule, r.target_id) for r in store.results()}) == 2 + BUSY_FOR
