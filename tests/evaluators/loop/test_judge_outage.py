"""Judge outages (issue 30 item 4): the default retry schedule outlasts a provider incident, the
outage is logged once when it starts and once when it ends and is counted, and what an outage
longer than the schedule left as errors is evaluated again by `backfill --retry-errors`. A
scripted judge fails while the test's clock says so; no test waits on the wall clock."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from spanjudge._store import open_store
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._loop.runner import retry_window
from spanjudge.evaluators._plan.planner import TickReport
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.settings import WorkerSettings
from spanjudge.testing import Fault, ScriptedJudgeServer
from tests.evaluators.online.spans import Trace
from tests.support.clock import T0, Clock

SETTLE = 10.0
OLD_WINDOW = 90.0  # three attempts, 30 s and 60 s apart: the schedule before this fix
OUTAGE = 15 * 60.0  # a provider incident of a quarter of an hour


class FlakyJudge:
    """A scripted bias judge that answers 503 while ``down(now)``."""

    def __init__(self, server: ScriptedJudgeServer, clock: Clock, until: float) -> None:
        self.clock, self.until = clock, until
        server.add_rule(Fault.status(503), match=lambda request: self.clock() < self.until)
        server.add_rule({"opinions": []}, schema="Opinions")
        server.add_rule({"verdicts": []}, schema="BiasVerdicts")
        server.add_rule({"reason": "No opinions, so nothing biased."}, schema="Reason")
        self.server = server

    def judge(self) -> Any:
        # no retry inside the judge: each job attempt is one call, and nothing sleeps
        return self.server.judge(max_retries=0, timeout=10.0)


def write_turns(store: SpanStore, clock: Clock, n: int) -> None:
    for i in range(n):
        trace = Trace()
        trace.llm(f"Question {i}: where is my order?", "It ships tomorrow.")
        store.write_spans(trace.spans, now=clock())


def run_until(mon: Monitor, clock: Clock, end: float, step: float = 30.0) -> TickReport:
    """Tick every ``step`` seconds of the test's clock until ``end``; the reports summed."""
    total = TickReport()
    while clock() <= end:
        report = mon.tick()
        total.scored += report.scored
        total.errors += report.errors
        total.retried += report.retried
        clock.advance(step)
    return total


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = open_store(f"sqlite:///{tmp_path}/spans.db")
    yield s
    s.close()


def monitor(store: SpanStore, judge: Any, clock: Clock, **config: Any) -> Monitor:
    return Monitor(
        [Rule(BiasMetric(model=judge), target="llm", name="bias")],
        store=store,
        clock=clock,
        config=MonitorConfig(settle_seconds=SETTLE, retention_seconds=None, **config),
    )


def test_the_default_schedule_outlasts_a_provider_incident() -> None:
    config = MonitorConfig()
    assert retry_window(config) == 30 + 60 + 90 + 120 + 150 + 180 + 210 + 240 + 270 + 300 + 300
    assert retry_window(config) >= 30 * 60
    assert retry_window(MonitorConfig(max_attempts=3)) == OLD_WINDOW
    capped = MonitorConfig(max_attempts=4, retry_delay_seconds=100, retry_max_delay_seconds=150)
    assert retry_window(capped) == 100 + 150 + 150


def test_the_schedule_is_a_worker_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANJUDGE_RETRY_MAX_DELAY_SECONDS", "120")
    settings = WorkerSettings(max_attempts=20)
    config = settings.monitor_config()
    assert (config.max_attempts, config.retry_max_delay_seconds) == (20, 120.0)


def test_an_outage_longer_than_the_old_window_ends_in_scored_results(
    store: SpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    with ScriptedJudgeServer() as server:
        flaky = FlakyJudge(server, clock, until=T0 + SETTLE + OUTAGE)
        write_turns(store, clock, 3)
        clock.advance(SETTLE + 1)
        mon = monitor(store, flaky.judge(), clock)
        caplog.set_level(logging.INFO, logger="spanjudge.monitor")
        total = run_until(mon, clock, end=T0 + SETTLE + OUTAGE + retry_window(mon.config))
        failed_calls = sum(1 for r in server.requests if r.status == 503)

    assert OUTAGE > 5 * OLD_WINDOW
    results = store.results()
    assert [r.status for r in results] == ["scored"] * 3
    assert total.errors == 0 and total.retried >= 3 * 5
    health = mon.runner.health
    assert (health.outages, health.gave_up, health.down) == (1, 0, False)
    assert health.failed == failed_calls == total.retried
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "spanjudge.monitor"]
    failing = [m for level, m in said if level == "WARNING" and "judge is failing" in m]
    assert len(failing) == 1, said
    assert "judge_server_error" in failing[0] and "32.5 min" in failing[0]
    recovered = [m for level, m in said if level == "INFO" and "judge answers again" in m]
    assert len(recovered) == 1 and f"{health.failed} attempt(s) failed" in recovered[0]
    assert not any("now recorded as errors" in m for _, m in said)


def test_what_an_outage_left_as_errors_backfill_retry_errors_evaluates_again(
    store: SpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    with ScriptedJudgeServer() as server:
        flaky = FlakyJudge(server, clock, until=T0 + SETTLE + OUTAGE)
        write_turns(store, clock, 2)
        clock.advance(SETTLE + 1)
        mon = monitor(store, flaky.judge(), clock, max_attempts=3)  # the old schedule
        caplog.set_level(logging.INFO, logger="spanjudge.monitor")
        run_until(mon, clock, end=T0 + SETTLE + 2 * OLD_WINDOW)
        assert [r.status for r in store.results()] == ["error", "error"]
        assert mon.runner.health.gave_up == 2 and mon.runner.health.down
        gave_up = [r.getMessage() for r in caplog.records if "now recorded" in r.getMessage()]
        assert len(gave_up) == 1 and "--retry-errors" in gave_up[0]

        clock.advance(OUTAGE)  # the judge is back
        assert mon.backfill(since=T0).retried_errors == 0, "only when asked"
        report = mon.backfill(since=T0, retry_errors=True)

    assert (report.retried_errors, report.scored, report.errors) == (2, 2, 0)
    current = store.results()
    assert [r.status for r in current] == ["scored", "scored"]
    superseded = store.superseded_results()
    assert sorted(s.record.target_id for s in superseded) == sorted(r.target_id for r in current)
    assert {(s.reason, s.record.status) for s in superseded} == {("retry_errors", "error")}
    assert store.errored_job_ids(since=T0, until=clock()) == []
    assert not mon.runner.health.down


def outcome(status: str, error_type: str | None = None, calls: int = 1) -> Any:
    from spanjudge._core.span_record import EvaluationRecord

    record = EvaluationRecord("bias", "bias", "llm", "s1", "t1", "s1", status=status)
    record.error_type, record.error_message, record.judge_calls = error_type, "boom", calls
    return record


def test_an_answer_ends_an_outage_and_a_cached_result_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    mon = Monitor([Rule(BiasMetric(model="openai/x"), target="llm")], store=":memory:", clock=clock)
    health = mon.runner.health
    caplog.set_level(logging.INFO, logger="spanjudge.monitor")
    health.observe(outcome("error", "judge_timeout"), retried=True)
    clock.advance(60)
    health.observe(outcome("scored", calls=0), retried=False)  # reused: no judge call
    health.observe(outcome("error", "judge_rate_limited"), retried=True)
    assert (health.outages, health.failed, health.down) == (1, 2, True)
    health.observe(outcome("error", "judge_output_invalid"), retried=False)  # it answered
    assert not health.down
    health.observe(outcome("error", "judge_connection"), retried=True)  # a second outage
    assert health.outages == 2
    lines = [r.getMessage() for r in caplog.records]
    assert sum("judge is failing" in m for m in lines) == 2
    assert [m for m in lines if m.startswith("the judge answers again")] == [
        "the judge answers again after 60 s: 2 attempt(s) failed meanwhile, 0 evaluation(s) "
        "recorded as errors"
    ]
    mon.close()
