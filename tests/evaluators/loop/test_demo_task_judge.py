"""The demo's offline judge answers Task Completion's prompt by a text rule (the share of tool
calls that did not fail, the failed steps blamed), through the real judge path; it is not a
model, and an empty or odd trajectory still gets an answer, never an error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spanjudge._demo.judge import start_offline_judge
from spanjudge.evaluators._judge.metrics.task_completion import TaskCompletionMetric
from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.evaluators._rebuild.trajectory import Step, Trajectory
from spanjudge.testing import ScriptedJudgeServer

TASK = "Where is my order 1042? Please refund the express shipping I paid for it."


@pytest.fixture(scope="module")
def judge() -> Iterator[ScriptedJudgeServer]:
    server = start_offline_judge()
    yield server
    server.stop()


def case(*steps: Step) -> LLMTestCase:
    trajectory = Trajectory(
        "agent", "t1", "s1", task=TASK, final_output="Refunded.", steps=list(steps)
    )
    return LLMTestCase(input=TASK, actual_output="Refunded.", trajectory=trajectory)


def test_a_failed_tool_call_lowers_the_score_and_is_blamed(judge: ScriptedJudgeServer) -> None:
    metric = TaskCompletionMetric(threshold=0.7, model=judge.judge())
    metric.measure(
        case(
            Step(0, "tool_call", "lookup_order", "a", agent="support", arguments={"id": "1042"}),
            Step(1, "tool_call", "refund", "b", agent="support", error="RefundError: no fee"),
            Step(2, "model_call", "demo-llm", "c", result="Refunded."),
        )
    )
    assert metric.score == 0.5 and metric.success is False
    assert "step 1 (refund)" in (metric.reason or "")
    assert metric.task == TASK


@pytest.mark.parametrize(
    "steps",
    [
        [Step(0, "tool_call", "lookup_order", "a", result="shipped")],
        [],
        [Step(0, "model_call", "demo-llm", "c", result="ERROR: not a step error")],
    ],
)
def test_without_a_failed_step_the_task_counts_as_done(
    judge: ScriptedJudgeServer, steps: list[Step]
) -> None:
    metric = TaskCompletionMetric(model=judge.judge())
    metric.measure(case(*steps))
    assert metric.score == 1.0, metric.reason
