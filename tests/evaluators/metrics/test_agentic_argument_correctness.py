"""ArgumentCorrectnessMetric (issue 28 item 2): a verdict per tool call on its arguments, in one
judge call with the reason (deepeval makes two); score = correct / total; no call, score 1."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.errors import MetricError
from spanjudge.evaluators._judge.metrics.argument_correctness import ArgumentCorrectnessMetric
from spanjudge.evaluators._judge.test_case import LLMTestCase, ToolCall
from spanjudge.evaluators._rebuild.trajectory import Step, Trajectory
from tests.evaluators.metrics.agentic_support import TASK, case_of, support_trajectory
from tests.evaluators.metrics.conftest import prompts_for, schema_names

SCHEMA = "ArgumentVerdicts"


def script(server: Any, verdicts: list[str], **extra: Any) -> None:
    server.add_rule(
        {
            "verdicts": [
                {"step": i, "verdict": v, "reason": f"r{i}"} for i, v in enumerate(verdicts)
            ],
            "reason": "scripted reason.",
        },
        schema=SCHEMA,
        **extra,
    )


@pytest.mark.parametrize(
    ("verdicts", "expected", "success"),
    [
        (["yes", "yes", "yes"], 1.0, True),
        (["yes", "no", "yes"], 2 / 3, True),
        (["no", "no", "yes"], 1 / 3, False),
        (["no", "no", "no"], 0.0, False),
    ],
)
def test_score_is_correct_calls_over_calls_in_one_call(
    judge_server: Any, scripted_judge: Any, verdicts: list[str], expected: float, success: bool
) -> None:
    script(judge_server, verdicts)
    metric = ArgumentCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory())) == pytest.approx(expected)
    assert metric.success is success
    assert schema_names(judge_server) == [SCHEMA]  # deepeval: verdicts, then a reason


def test_reason_names_the_steps_with_wrong_arguments(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["no", "yes", "yes"])
    metric = ArgumentCorrectnessMetric(model=scripted_judge)
    metric.measure(case_of(support_trajectory()))
    assert metric.reason == (
        "2 of 3 tool calls had the right arguments. scripted reason. Steps that lowered the "
        "score: step 1 (tool_call lookup_order)."
    )
    assert metric.to_data().verdicts[0] == {
        "tool": "lookup_order",
        "step_label": "step 1 (tool_call lookup_order)",
        "step": 0,
        "verdict": "no",
        "reason": "r0",
    }


def test_prompt_shows_each_calls_arguments(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes"] * 3)
    ArgumentCorrectnessMetric(model=scripted_judge).measure(case_of(support_trajectory()))
    (prompt,) = prompts_for(judge_server, SCHEMA)
    assert '1. [step 1] lookup_order arguments: {"id": 7}' in prompt
    assert TASK in prompt


def test_no_tool_call_scores_one_without_a_call(judge_server: Any, scripted_judge: Any) -> None:
    metric = ArgumentCorrectnessMetric(model=scripted_judge)
    case = LLMTestCase(input="hi", actual_output="hello", tools_called=[])
    assert metric.measure(case) == 1.0
    assert judge_server.requests == []
    assert metric.reason == "No tool was called, so no argument was wrong."


def test_hand_written_tools_called_are_judged(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["no"])
    case = LLMTestCase(
        input="Weather in Paris?",
        actual_output="Sunny",
        tools_called=[ToolCall(name="weather", input_parameters={"city": "Rome"})],
    )
    metric = ArgumentCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case) == 0.0
    assert "step 0 (tool_call weather)" in (metric.reason or "")


def test_only_the_first_calls_are_judged_and_the_reason_says_so(
    judge_server: Any, scripted_judge: Any
) -> None:
    from spanjudge.evaluators._judge.metrics.agent_text import MAX_JUDGED_CALLS

    script(judge_server, ["yes"] * MAX_JUDGED_CALLS)
    steps = [Step(i, "tool_call", "search", str(i), arguments={"q": i}) for i in range(100)]
    case = case_of(Trajectory("agent", "t", "s", task=TASK, steps=steps))
    metric = ArgumentCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case) == 1.0
    assert f"(the first {MAX_JUDGED_CALLS} of 100 calls judged)" in (metric.reason or "")


def test_strict_mode_and_bad_json(judge_server: Any, scripted_judge: Any) -> None:
    from spanjudge.testing import Fault

    script(judge_server, ["yes", "yes", "no"], times=1)
    strict = ArgumentCorrectnessMetric(model=scripted_judge, strict_mode=True)
    assert strict.measure(case_of(support_trajectory())) == 0.0
    judge_server.add_rule(Fault.malformed("nope"), schema=SCHEMA)
    metric = ArgumentCorrectnessMetric(model=scripted_judge)
    with pytest.raises(MetricError):
        metric.measure(case_of(support_trajectory()))
    assert metric.score is None and metric.error_type
