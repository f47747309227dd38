"""Deterministic sampling and per-rule budgets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from spanjudge.evaluators._plan.sampler import Budget, is_sampled, sample_point

IDS = [f"{i:016x}" for i in range(100_000)]


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.25, 0.5, 0.9])
def test_achieved_rate_on_100k_targets_is_within_1_percent(rate: float) -> None:
    achieved = sum(is_sampled("faithfulness-llm", t, rate) for t in IDS) / len(IDS)
    assert abs(achieved - rate) <= 0.01
    # and close in relative terms too, so a small rate is not "0.0 within 1%"
    assert abs(achieved - rate) <= 0.05 * rate


def test_rate_zero_never_rate_one_always() -> None:
    sample = IDS[:5000]
    assert not any(is_sampled("r", t, 0.0) for t in sample)
    assert all(is_sampled("r", t, 1.0) for t in sample)
    assert not any(is_sampled("r", t, float("nan")) for t in sample)


def test_raising_the_rate_only_adds_targets() -> None:
    sample = IDS[:20_000]
    low = {t for t in sample if is_sampled("bias-agent", t, 0.1)}
    high = {t for t in sample if is_sampled("bias-agent", t, 0.3)}
    assert low < high


def test_rules_sample_independently() -> None:
    sample = IDS[:20_000]
    a = {t for t in sample if is_sampled("faithfulness-llm", t, 0.5)}
    b = {t for t in sample if is_sampled("bias-llm", t, 0.5)}
    overlap = len(a & b) / len(sample)
    assert abs(overlap - 0.25) < 0.02  # independent coins: half of half


def test_same_answers_in_a_fresh_process_with_another_hash_seed() -> None:
    sample = IDS[:3000]
    here = [t for t in sample if is_sampled("faithfulness-llm", t, 0.3)]
    code = (
        "import sys, json\n"
        "from spanjudge.evaluators._plan.sampler import is_sampled, sample_point\n"
        "ids = [f'{i:016x}' for i in range(3000)]\n"
        "print(json.dumps([[t for t in ids if is_sampled('faithfulness-llm', t, 0.3)],"
        " sample_point('r', 'x')]))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    there, point = json.loads(out.stdout)
    assert there == here
    assert point == sample_point("r", "x")
    assert 0 < len(here) < len(sample)


# ----------------------------------------------------------------------------- budgets
def test_per_minute_budget_slides_with_the_callers_clock() -> None:
    budget = Budget(max_per_minute=3)
    assert [budget.allow(t) for t in (0.0, 10.0, 20.0)] == [None, None, None]
    assert budget.allow(30.0) == "rate_budget"
    assert budget.allow(59.9) == "rate_budget"
    # refusals are not admissions: at 60.0 the one from 0.0 left the window
    assert budget.allow(60.0) is None
    assert budget.allow(61.0) == "rate_budget"
    assert budget.allow(70.0) is None  # 10.0 left the window
    assert budget.admitted_in_window(70.0) == 3


def test_daily_cost_budget_rolls_over_at_utc_midnight() -> None:
    day = 20_000 * 86400.0
    budget = Budget(max_cost_per_day=1.0)
    assert budget.allow(day + 10) is None
    budget.record(0.6, day + 20)
    assert budget.allow(day + 30) is None
    budget.record(0.5, day + 40)
    assert budget.spent_today == pytest.approx(1.1)
    assert budget.allow(day + 50) == "cost_budget"
    assert budget.allow(day + 86399) == "cost_budget"
    assert budget.allow(day + 86400) is None  # next UTC day
    assert budget.spent_today == 0.0


def test_record_ignores_missing_or_bogus_costs() -> None:
    budget = Budget(max_cost_per_day=1.0)
    for cost in (None, 0.0, -3.0, float("nan"), float("inf")):
        budget.record(cost, 5.0)
    assert budget.spent_today == 0.0


def test_seed_resumes_the_days_spend_after_a_restart() -> None:
    now = 20_000 * 86400.0 + 3600
    budget = Budget(max_cost_per_day=2.0)
    budget.seed(2.5)  # no time given: belongs to the day of the next call
    assert budget.allow(now) == "cost_budget"

    seeded_yesterday = Budget(max_cost_per_day=2.0)
    seeded_yesterday.seed(2.5, now=now - 86400)
    assert seeded_yesterday.allow(now) is None

    seeded_today = Budget(max_cost_per_day=2.0)
    seeded_today.seed(1.5, now=now)
    assert seeded_today.allow(now + 1) is None
    seeded_today.record(0.5, now + 2)
    assert seeded_today.allow(now + 3) == "cost_budget"


def test_cost_budget_is_reported_before_the_rate_budget() -> None:
    budget = Budget(max_per_minute=1, max_cost_per_day=1.0)
    assert budget.allow(0.0) is None
    assert budget.allow(1.0) == "rate_budget"
    budget.record(1.0, 2.0)
    assert budget.allow(3.0) == "cost_budget"


def test_no_limits_admit_everything() -> None:
    budget = Budget()
    assert all(budget.allow(float(i) / 1000) is None for i in range(10_000))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_per_minute": 0}, "max_per_minute"),
        ({"max_per_minute": 1.5}, "max_per_minute"),
        ({"max_per_minute": True}, "max_per_minute"),
        ({"max_cost_per_day": 0}, "max_cost_per_day"),
        ({"max_cost_per_day": -1.0}, "max_cost_per_day"),
        ({"max_cost_per_day": float("inf")}, "max_cost_per_day"),
    ],
)
def test_invalid_budgets_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Budget(**kwargs)  # type: ignore[arg-type]


def test_budget_is_thread_safe() -> None:
    budget = Budget(max_per_minute=500)
    admitted: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        mine = sum(budget.allow(5.0) is None for _ in range(1000))
        with lock:
            admitted.append(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(admitted) == 500
    assert budget.admitted_in_window(5.0) == 500
