"""StepEfficiencyMetric, PlanAdherenceMetric and PlanQualityMetric (issue 28 item 2): one judge
call each (deepeval: two and three); no plan step scores 1 with no call, as deepeval does when
it finds no plan; reasons name the steps."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.errors import MetricError
from spanjudge.evaluators._judge.metrics.plan_metrics import (
    NO_PLAN_REASON,
    PlanAdherenceMetric,
    PlanQualityMetric,
)
from spanjudge.evaluators._judge.metrics.step_efficiency import StepEfficiencyMetric
from tests.evaluators.metrics.agentic_support import TASK, case_of, support_trajectory
from tests.evaluators.metrics.conftest import prompts_for, schema_names

METRICS = [
    (StepEfficiencyMetric, "StepEfficiencyVerdict"),
    (PlanAdherenceMetric, "PlanAdherenceVerdict"),
    (PlanQualityMetric, "PlanQualityVerdict"),
]


def script(server: Any, schema: str, score: float, steps: list[int]) -> None:
    server.add_rule(
        {"task": "t", "score": score, "reason": "scripted reason.", "steps": steps}, schema=schema
    )


@pytest.mark.parametrize(("cls", "schema"), METRICS)
@pytest.mark.parametrize(("score", "success"), [(1.0, True), (0.5, True), (0.2, False)])
def test_score_is_the_judges_in_one_call(
    judge_server: Any, scripted_judge: Any, cls: Any, schema: str, score: float, success: bool
) -> None:
    script(judge_server, schema, score, [])
    metric = cls(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory(plan=True))) == pytest.approx(score)
    assert metric.success is success
    assert schema_names(judge_server) == [schema] and metric.judge_calls == 1


@pytest.mark.parametrize(("cls", "schema"), METRICS)
def test_reason_names_the_blamed_steps(
    judge_server: Any, scripted_judge: Any, cls: Any, schema: str
) -> None:
    script(judge_server, schema, 0.5, [4, 0])
    metric = cls(model=scripted_judge)
    metric.measure(case_of(support_trajectory(plan=True)))
    assert metric.reason == (
        "scripted reason. Steps that lowered the score: step 4 (tool_call send_email), "
        "step 0 (plan plan)."
    )


@pytest.mark.parametrize("cls", [PlanAdherenceMetric, PlanQualityMetric])
def test_no_plan_step_scores_one_without_a_call_and_says_why(
    judge_server: Any, scripted_judge: Any, cls: Any
) -> None:
    metric = cls(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory())) == 1.0
    assert metric.success is True and metric.judge_calls == 0
    assert judge_server.requests == []
    assert metric.reason == NO_PLAN_REASON
    assert "no plan step" in NO_PLAN_REASON and "deepeval" in NO_PLAN_REASON


def test_plan_adherence_shows_the_plan_and_the_executed_steps(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, "PlanAdherenceVerdict", 1.0, [])
    metric = PlanAdherenceMetric(model=scripted_judge)
    metric.measure(case_of(support_trajectory(plan=True)))
    (prompt,) = prompts_for(judge_server, "PlanAdherenceVerdict")
    plan, executed = prompt.split('<quoted-data label="Steps executed">')
    assert "1. look up order 7" in plan
    assert "[step 4] tool_call send_email" in executed and "[step 0] plan" not in executed
    assert metric.plan == ["1. look up order 7\n2. cancel it\n3. send email"]


def test_plan_quality_shows_task_tools_and_plan_only(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, "PlanQualityVerdict", 1.0, [])
    PlanQualityMetric(model=scripted_judge).measure(case_of(support_trajectory(plan=True)))
    (prompt,) = prompts_for(judge_server, "PlanQualityVerdict")
    assert TASK in prompt and "- cancel_order" in prompt and "3. send email" in prompt
    assert "send_email\n  arguments" not in prompt  # the execution is not the question


def test_step_efficiency_keeps_the_task_the_judge_read(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, "StepEfficiencyVerdict", 0.75, [1])
    metric = StepEfficiencyMetric(model=scripted_judge)
    metric.measure(case_of(support_trajectory()))
    assert metric.task == "t"
    assert metric.to_data().verdicts[0]["blamed_steps"] == ["step 1 (tool_call lookup_order)"]


@pytest.mark.parametrize(("cls", "schema"), METRICS)
def test_out_of_range_score_is_repaired_and_bad_json_is_an_error(
    judge_server: Any, scripted_judge: Any, cls: Any, schema: str
) -> None:
    from spanjudge.testing import Fault

    judge_server.add_rule({"score": -1, "reason": "r"}, schema=schema, times=1)
    script(
        judge_server,
        schema,
        0.25,
        [],
    )
    metric = cls(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory(plan=True))) == 0.25
    judge_server.clear()
    judge_server.add_rule(Fault.malformed("garbage"), schema=schema)
    with pytest.raises(MetricError):
        metric.measure(case_of(support_trajectory(plan=True)))
    assert metric.score is None


@pytest.mark.parametrize(("cls", "schema"), METRICS)
def test_strict_mode_imperfect_is_zero(
    judge_server: Any, scripted_judge: Any, cls: Any, schema: str
) -> None:
    script(judge_server, schema, 0.9, [])
    metric = cls(model=scripted_judge, strict_mode=True)
    assert metric.measure(case_of(support_trajectory(plan=True))) == 0.0
