"""A person's late ``fail`` label reaches the monitor's tick: a precision rule that passed a
trace over evaluates it once the label is stored (the queueing itself is tested in
tests/evaluators/online/test_allocation.py; this holds the wiring)."""

from __future__ import annotations

from pathlib import Path

from spanjudge._core.span_record import FeedbackRecord
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.evaluators._judge.metrics.trajectory_checks import StepLimitCheck
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.allocation import AllocationState
from spanjudge.evaluators._plan.rules import Rule
from tests.evaluators.online.spans import Trace

NOW = 50_000.0


def test_a_late_fail_label_is_evaluated_by_the_next_tick(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    clock = [NOW]
    rule = Rule(StepLimitCheck(), target="agent", name="steps", target_half_width=0.05)
    traces = []
    for _ in range(5):
        trace = Trace("shop")
        trace.llm(user="q", answer="a", parent=trace.agent(user="q", answer="a"))
        store.write_spans(trace.spans, now=NOW - 100)
        traces.append(trace)
    monitor = Monitor(
        [rule],
        store=store,
        clock=lambda: clock[0],
        config=MonitorConfig(settle_seconds=10, retention_seconds=None),
    )
    assert monitor.labels is not None
    # the allocation gives the shop next to nothing: every trace is passed over
    monitor.planner.allocation.set_state(rule, AllocationState({"shop": 1e-9}, computed_at=NOW))
    monitor.tick()
    assert store.results() == []
    late = traces[2]
    store.add_feedback(
        [FeedbackRecord(metric="step_limit", label="fail", trace_id=late.trace_id)], now=NOW + 5
    )
    clock[0] = NOW + 10
    monitor.tick()
    (result,) = store.results()
    assert (result.trace_id, result.status) == (late.trace_id, "scored")
    assert result.sample_rate == 1.0  # the risk rate, recorded for the estimates
    store.close()
