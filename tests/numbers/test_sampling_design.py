"""Issue 40: the numbers hold under our own sampling design. One test per failing row of the
issue's table (each failed before the change): intervals under risk-boosted weights, the mean
score of scores piled at 1.0, the regression test's false alarms with a growing baseline, a
budget that risk and new-version boosts spend from, segments reported when they cannot reach
the target precision, and a fold that keeps a real ``other`` apart.

The samples are drawn as our sampler makes them: strata of the traffic with their share, the
probability they are sampled with and their pass rate; a verdict comes from stratum h with
probability share_h q_h / sum(share q) and weighs 1 / q_h (benchmarks/sampling.py draws the
same cells with more replicates)."""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path

import pytest

from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge._store.summaries import SegmentSums
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._plan.allocation import Allocation
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import Budget, is_sampled
from spanjudge.evaluators._rebuild.targets import Target
from spanjudge.evaluators._review.estimates import (
    OTHER,
    fold_segments,
    mean_interval,
    pass_rate,
    summarize,
)
from spanjudge.evaluators._review.regressions import WORSE, compare_pass_rate

# (share of the traffic, sampling probability, pass rate): the budget sampler with risk
# boosts (5% of the traffic risky, sampled at 1, failing more often)
BUDGET_RISK = [(0.57, 0.02, 0.9), (0.38, 0.1, 0.9), (0.05, 1.0, 0.6)]
# 90% of the verdicts at a low rate beside a boosted 10%
MIX_90_10 = [(0.9 / 0.02, 0.02, 0.5), (0.1, 1.0, 0.2)]


def _truth(strata: list[tuple[float, float, float]]) -> float:
    return sum(share * rate for share, _q, rate in strata) / sum(s for s, _q, _r in strata)


def _add(s: SegmentSums, weight: float, passed: int, score: float | None = None) -> None:
    s.scored += 1
    s.add_result(weight, passed, float(passed) if score is None else score)


def _verdict(rng: random.Random, strata: list[tuple[float, float, float]]) -> tuple[float, int]:
    mass = sum(share * q for share, q, _r in strata)
    u, top = rng.random() * mass, 0.0
    for share, q, rate in strata:
        top += share * q
        if u < top:
            return 1 / q, int(rng.random() < rate)
    return 1 / strata[-1][1], int(rng.random() < strata[-1][2])


def _sample(rng: random.Random, strata: list[tuple[float, float, float]], n: int) -> SegmentSums:
    s = SegmentSums()
    for _ in range(n):
        _add(s, *_verdict(rng, strata))
    return s


# ------------------------------------------------------------------ 95% pass-rate interval
@pytest.mark.parametrize(("strata", "n"), [(BUDGET_RISK, 30), (MIX_90_10, 30), (BUDGET_RISK, 100)])
def test_pass_rate_interval_covers_under_risk_boosted_weights(
    strata: list[tuple[float, float, float]], n: int
) -> None:
    rng = random.Random(n)
    truth, covered, runs = _truth(strata), 0, 600
    for _ in range(runs):
        s = _sample(rng, strata, n)
        rate, n_eff = pass_rate(s)
        # the effective size never exceeds Kish's: the weights' own limit on the information
        assert n_eff <= s.pass_weight**2 / s.pass_weight2 * (1 + 1e-12)
        assert rate.low is not None and rate.high is not None
        covered += rate.low <= truth <= rate.high
    assert covered / runs >= 0.93


# ------------------------------------------------------------------ 95% mean-score interval
def test_a_run_of_equal_scores_never_gives_a_zero_width_interval() -> None:
    s = SegmentSums()
    for _ in range(10):
        _add(s, 1.0, 1, 1.0)
    mean, _variance = mean_interval(s)
    assert mean.value == 1.0 and mean.high == 1.0
    # ten scores of 1.0 bound the mean below by Wilson's 10 / (10 + z^2), not by 1.0
    assert mean.low == pytest.approx(10 / (10 + 1.959963984540054**2), rel=1e-9)
    for value in (0.0, 0.7):
        same = SegmentSums()
        for _ in range(5):
            _add(same, 4.0, int(value >= 0.5), value)
        low_high = mean_interval(same)[0]
        assert low_high.low is not None and low_high.high is not None
        assert low_high.high - low_high.low > 0.3


@pytest.mark.parametrize(("ones", "n"), [(0.97, 30), (0.97, 100), (0.995, 30)])
def test_mean_score_interval_covers_scores_piled_at_one(ones: float, n: int) -> None:
    rng = random.Random(int(ones * 1000) + n)
    truth, covered, runs = ones + (1 - ones) / 2, 0, 600
    for _ in range(runs):
        s = SegmentSums()
        for _ in range(n):
            score = 1.0 if rng.random() < ones else rng.random()
            _add(s, 1.0, int(score >= 0.5), score)
        mean, _variance = mean_interval(s)
        assert mean.low is not None and mean.high is not None and mean.high > mean.low
        covered += mean.low <= truth <= mean.high
    assert covered / runs >= 0.93


# ------------------------------------------------------------------ the regression test
@pytest.mark.parametrize("strata", [BUDGET_RISK, MIX_90_10], ids=["budget_risk", "mix_90_10"])
def test_false_alarms_stay_under_alpha_with_a_growing_baseline(
    strata: list[tuple[float, float, float]],
) -> None:
    # "no difference": both sides from the same design; the baseline starts small and grows
    # beside the candidate, the test is read after every verdict
    rng = random.Random(len(strata))
    runs, alarms = 300, 0
    for _ in range(runs):
        base, cand = _sample(rng, strata, 20), SegmentSums()
        for _ in range(250):
            _add(cand, *_verdict(rng, strata))
            _add(base, *_verdict(rng, strata))
            if compare_pass_rate(base, cand).decision in (WORSE, "better"):
                alarms += 1
                break
    assert alarms / runs <= 0.05


def test_no_decision_before_each_side_has_the_minimum_information() -> None:
    # 25 candidate verdicts, two of them weighing 50 (a low-rate segment) and failing, the
    # rest risk-boosted passes: Kish's effective size is 3, not 25. Main decided "worse".
    base = _sample(random.Random(8), [(1.0, 1.0, 0.9)], 2000)
    cand = SegmentSums()
    for weight, passed in [(50.0, 0)] * 2 + [(1.0, 1)] * 23:
        _add(cand, weight, passed)
    assert cand.pass_weight**2 / cand.pass_weight2 < 4
    assert compare_pass_rate(base, cand).decision == "too few"
    for _ in range(40):  # with the information, the same rates decide
        _add(cand, 50.0, 0)
    assert compare_pass_rate(base, cand).decision == WORSE


def test_a_real_regression_is_still_found_under_the_weights() -> None:
    rng = random.Random(3)
    good = [(0.57, 0.02, 0.9), (0.38, 0.1, 0.9), (0.05, 1.0, 0.6)]
    bad = [(0.57, 0.02, 0.7), (0.38, 0.1, 0.7), (0.05, 1.0, 0.4)]
    found = 0
    for _ in range(20):
        base, cand = _sample(rng, good, 600), SegmentSums()
        for _ in range(1500):
            _add(cand, *_verdict(rng, bad))
            if compare_pass_rate(base, cand).decision == WORSE:
                found += 1
                break
    assert found >= 18


# ------------------------------------------------------------------ a budget is a budget
def _target(i: int, at: float, *, version: str = "1.0", error: bool = False) -> Target:
    span = SpanRecord(f"{i:032x}", f"{i:016x}", "chat", int(at * 1e9), int(at * 1e9) + 1,
                      resource={"service.name": "busy", "service.version": version},
                      status_code="ERROR" if error else "UNSET")  # fmt: skip
    return Target("llm", span.span_id, span.trace_id, span.span_id, None, span, "busy",
                  span.end_time_unix_nano)  # fmt: skip


class _Sums:
    """A store that has seen one day of results: the segment and a version, first seen at 0."""

    def __init__(self, traffic: float) -> None:
        self.s = SegmentSums()
        for i in range(200):
            _add(self.s, traffic / 200, int(i % 10 != 0))
        self.s.first_at = 0.0

    def summary_sums(self, **kwargs: object) -> dict[tuple[str, str, str], SegmentSums]:
        value = "1.0" if kwargs.get("by") == "service.version" else "busy"
        return {("r", "faithfulness", value): self.s}

    def results_cost_since(self, **kwargs: object) -> float:
        return 0.0


def _day_of_calls(rule: Rule, *, risky: float, version: str, traffic: int) -> int:
    """Judge calls a rule makes over one day of ``traffic`` targets, through the real
    allocation, risk signals, sampling decision and the planner's budget."""
    allocation = Allocation(_Sums(traffic), refresh_seconds=3600.0)
    budget = Budget(max_per_day=rule.budget_per_day)
    rng, calls = random.Random(9), 0
    for i in range(traffic):
        at = 86400.0 + i * 86400.0 / traffic
        target = _target(i, at, version=version, error=rng.random() < risky)
        p = allocation.probability(rule, target, [target.span] if target.span else [], at)
        if is_sampled(rule.name, target.target_id, p) and budget.allow(at) is None:
            calls += 1
    return calls


def test_risk_boosts_spend_from_the_budget_never_past_it() -> None:
    rule = Rule(FaithfulnessMetric(model="stub"), name="r", sample_rate=0.05,
                budget_per_day=400, risk_sample_rate=1.0)  # fmt: skip
    assert _day_of_calls(rule, risky=0.05, version="1.0", traffic=20_000) <= 400


def test_a_deploy_day_stays_within_the_budget() -> None:
    # a new version: every target of its first six hours is a risk (new_version)
    rule = Rule(FaithfulnessMetric(model="stub"), name="r", sample_rate=0.05,
                budget_per_day=400, risk_sample_rate=1.0)  # fmt: skip
    assert _day_of_calls(rule, risky=0.0, version="2.0", traffic=20_000) <= 400


def test_the_risk_share_is_a_setting_within_bounds() -> None:
    from spanjudge.errors import ConfigError

    metric = FaithfulnessMetric(model="stub")
    assert Rule(metric).risk_budget_share == 0.2
    with pytest.raises(ConfigError, match="risk_budget_share"):
        Rule(metric, risk_budget_share=1.5)


def test_the_daily_cap_refuses_past_the_budget_and_rolls_over() -> None:
    budget = Budget(max_per_day=3)
    assert [budget.allow(10.0 + i) for i in range(4)] == [None, None, None, "day_budget"]
    assert budget.allow(86400.0 + 1) is None
    budget.seed_count(3, now=2 * 86400.0)
    assert budget.allow(2 * 86400.0 + 5) == "day_budget"


# ------------------------------------------------------------------ precision per segment
def test_a_segment_that_cannot_reach_the_target_is_reported_in_the_summary() -> None:
    tiny = SegmentSums()
    for i in range(5):
        _add(tiny, 1.0, int(i != 0))
    big = _sample(random.Random(1), [(1.0, 1.0, 0.9)], 3000)
    sums = {("faith", "faithfulness", "tiny"): tiny, ("faith", "faithfulness", "big"): big}
    rows = {r.segment: r for r in summarize(sums, by="service", targets={"faith": 0.05})}
    assert rows["tiny"].under_covered and rows["tiny"].target_half_width == 0.05
    assert not rows["big"].under_covered
    # a rule without a target is never "under-covered"
    assert not any(r.under_covered for r in summarize(sums, by="service"))


def test_the_allocation_says_which_segments_cannot_reach_the_target() -> None:
    class Store:
        def summary_sums(self, **kwargs: object) -> dict[tuple[str, str, str], SegmentSums]:
            if kwargs.get("by") == "service.version":
                return {}
            tiny, busy = SegmentSums(), SegmentSums()
            for i in range(5):
                _add(tiny, 1.0, int(i != 0))
            for i in range(300):
                _add(busy, 20.0, int(i % 10 != 0))
            tiny.first_at = busy.first_at = 0.0  # a day of results
            return {("r", "faithfulness", "tiny"): tiny, ("r", "faithfulness", "busy"): busy}

        def results_cost_since(self, **kwargs: object) -> float:
            return 0.0

    rule = Rule(FaithfulnessMetric(model="stub"), name="r", target_half_width=0.05)
    state = Allocation(Store()).compute(rule, now=86400.0)
    assert set(state.short) == {"tiny"}
    assert state.short["tiny"] > 0.05  # the half-width its traffic allows


# ------------------------------------------------------------------ the segment fold
def test_the_fold_keeps_a_real_other_apart_and_leaves_its_input_alone() -> None:
    rng = random.Random(2)
    sums = {("r", "m", OTHER): _sample(rng, [(1.0, 1.0, 0.445)], 422)}
    for i in range(13):
        sums[("r", "m", f"s{i}")] = _sample(rng, [(1.0, 1.0, 0.5)], 400 - 20 * i)
    before = {k: (s.verdicts, s.passed_weight) for k, s in sums.items()}
    kept, folded = fold_segments(sums, cap=4)
    assert {k: (s.verdicts, s.passed_weight) for k, s in sums.items()} == before
    assert kept[("r", "m", OTHER)].verdicts == 422  # the real one, alone
    [fold] = [k for k in folded]
    assert fold[2] != OTHER and kept[fold].verdicts == sum(400 - 20 * i for i in range(3, 13))
    rows = {r.segment: r for r in summarize(kept, by="k", folded=folded)}
    assert (rows[OTHER].folded, rows[fold[2]].folded) == (0, 10)
    assert math.isclose(
        rows[OTHER].pass_rate.value or 0, sums[("r", "m", OTHER)].passed_weight / 422
    )


def test_the_watch_publishes_a_gauge_for_an_under_covered_segment() -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    from spanjudge.worker.numbers import UNDER_COVERED, NumbersConfig, NumbersWatch

    class Store:
        def summary_sums(self, **kwargs: object) -> dict[tuple[str, str, str], SegmentSums]:
            tiny, big = SegmentSums(), _sample(random.Random(5), [(1.0, 1.0, 0.9)], 3000)
            for i in range(5):
                _add(tiny, 1.0, int(i != 0))
            return {("faith", "faithfulness", "tiny"): tiny, ("faith", "faithfulness", "big"): big}

    config = NumbersConfig(interval_keys=("service",), targets=(("faith", 0.05),))
    rows = NumbersWatch(Store(), config, MeterProvider(), clock=lambda: 1000.0).compute(1000.0)
    gauges = {(labels["segment_key"], labels["segment"]): v for v, labels in rows[UNDER_COVERED]}
    assert (gauges[("service", "tiny")], gauges[("service", "big")]) == (1.0, 0.0)


def test_the_planner_warns_once_about_a_segment_that_cannot_reach_the_target(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Store:
        def summary_sums(self, **kwargs: object) -> dict[tuple[str, str, str], SegmentSums]:
            if kwargs.get("by") == "service.version":
                return {}
            tiny = SegmentSums()
            for i in range(5):
                _add(tiny, 1.0, int(i != 0))
            tiny.first_at = 0.0
            return {("r", "faithfulness", "tiny"): tiny}

        def results_cost_since(self, **kwargs: object) -> float:
            return 0.0

    rule = Rule(FaithfulnessMetric(model="stub"), name="r", target_half_width=0.05)
    allocation = Allocation(Store(), refresh_seconds=1.0)
    with caplog.at_level(logging.WARNING, logger="spanjudge.allocation"):
        allocation.state(rule, 86400.0)
        allocation.state(rule, 86400.0 + 10)
    warned = [r.getMessage() for r in caplog.records if "tiny" in r.getMessage()]
    assert len(warned) == 1 and "0.05" in warned[0]


def test_the_planner_caps_a_day_at_the_budget_and_resumes_the_count_after_a_restart(
    tmp_path: Path,
) -> None:
    from spanjudge._store.sqlite import SQLiteStore
    from spanjudge.evaluators._plan.allocation import AllocationState
    from spanjudge.evaluators._plan.planner import Planner, TickReport
    from tests.evaluators.online.spans import Trace

    now = 10 * 86400.0 + 3600.0
    rule = Rule(FaithfulnessMetric(model="stub"), target="llm", name="faith", sample_rate=0.5,
                budget_per_day=5, risk_sample_rate=0.0)  # fmt: skip
    store = SQLiteStore(f"sqlite:///{tmp_path / 'cap.db'}")
    try:

        def plan(count: int) -> tuple[int, int]:
            planner = Planner({rule.name: rule}, store, clock=lambda: now)
            planner.allocation.set_state(rule, AllocationState({"shop": 1.0}, computed_at=now))
            traces = [Trace(service="shop") for _ in range(count)]
            for trace in traces:
                trace.llm()
                store.write_spans(trace.spans, now=now - 100)
            report = TickReport()
            planner.plan_traces([t.trace_id for t in traces], report, now)
            jobs = store.claim_jobs(owner="t", limit=100, lease_seconds=60, now=now)
            for job in jobs:  # judged: the day's results a restart counts
                record = EvaluationRecord(
                    "faith", "faithfulness", "llm", job.target_id, job.trace_id, job.span_id,
                    score=1.0, success=True, label="pass", sample_rate=1.0, finished_at=now,
                )  # fmt: skip
                store.complete_job(job.job_id, owner="t", record=record, now=now)
            return len(jobs), report.skipped.get("day_budget", 0)

        assert plan(8) == (5, 3)  # every target sampled at 1.0: the budget stops it at 5
        assert plan(4) == (0, 4)  # a new planner (a restart) resumes from the day's 5 results
    finally:
        store.close()
