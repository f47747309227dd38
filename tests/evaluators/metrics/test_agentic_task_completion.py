"""TaskCompletionMetric (issue 28 item 2): one judge call returns task, outcome, score and the
steps that cost points; the score is the judge's alignment of outcome with task (deepeval's
formula); cases without content are missing fields, never scored."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.errors import MetricError, MissingFieldError
from spanjudge.evaluators._judge.metrics.task_completion import TaskCompletionMetric
from spanjudge.evaluators._judge.test_case import (
    ConversationalTestCase,
    LLMTestCase,
    ToolCall,
    Turn,
)
from spanjudge.evaluators._rebuild.trajectory import Trajectory
from tests.evaluators.metrics.agentic_support import TASK, case_of, support_trajectory
from tests.evaluators.metrics.conftest import prompts_for, schema_names

SCHEMA = "TaskCompletionVerdict"


def script(server: Any, verdict: float, steps: list[Any] | None = None) -> None:
    server.add_rule(
        {
            "task": "Cancel order 7 and confirm by email.",
            "outcome": "Cancelled; the email failed.",
            "verdict": verdict,
            "reason": "scripted reason.",
            "steps": steps or [],
        },
        schema=SCHEMA,
    )


@pytest.mark.parametrize(
    ("verdict", "success"), [(1.0, True), (0.75, True), (0.5, True), (0.25, False), (0.0, False)]
)
def test_score_is_the_judges_alignment_in_one_call(
    judge_server: Any, scripted_judge: Any, verdict: float, success: bool
) -> None:
    script(judge_server, verdict)
    metric = TaskCompletionMetric(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory())) == pytest.approx(verdict)
    assert metric.success is success
    assert schema_names(judge_server) == [SCHEMA]  # deepeval asks twice
    assert metric.judge_calls == 1
    assert metric.task == "Cancel order 7 and confirm by email."
    assert metric.outcome == "Cancelled; the email failed."


def test_the_prompt_shows_task_tools_steps_errors_and_final_output(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, 1.0)
    TaskCompletionMetric(model=scripted_judge).measure(case_of(support_trajectory()))
    (prompt,) = prompts_for(judge_server, SCHEMA)
    assert TASK in prompt
    assert "- refund_order: Refund an order" in prompt
    assert "[step 3] tool_call send_email" in prompt
    assert "ERROR: SMTPError: connection refused" in prompt
    assert "requests tool lookup_order" in prompt
    assert "Final output: Order 7 is cancelled" in prompt


def test_reason_names_the_steps_that_lowered_the_score(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, 0.5, [3, "step 2", 99])  # 99: no such step, left out
    metric = TaskCompletionMetric(model=scripted_judge)
    metric.measure(case_of(support_trajectory()))
    assert metric.reason == (
        "scripted reason. Steps that lowered the score: step 3 (tool_call send_email), "
        "step 2 (tool_call cancel_order)."
    )
    assert metric.to_data().verdicts[0]["blamed_steps"] == [
        "step 3 (tool_call send_email)",
        "step 2 (tool_call cancel_order)",
    ]


def test_a_perfect_score_blames_no_step(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, 1.0, [3])
    metric = TaskCompletionMetric(model=scripted_judge)
    metric.measure(case_of(support_trajectory()))
    assert metric.reason == "scripted reason."


def test_a_given_task_wins_and_is_said_to_be_given(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, 1.0)
    metric = TaskCompletionMetric(task="Only look the order up.", model=scripted_judge)
    metric.measure(case_of(support_trajectory()))
    (prompt,) = prompts_for(judge_server, SCHEMA)
    assert "Only look the order up." in prompt and TASK not in prompt
    assert "set by the evaluator" in prompt
    assert metric.task == "Only look the order up."


def test_a_hand_written_case_without_trajectory_reads_input_output_and_tools(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, 1.0)
    case = LLMTestCase(
        input="Weather in Paris?",
        actual_output="Sunny.",
        tools_called=[ToolCall(name="weather", input_parameters={"city": "Paris"}, output="sun")],
    )
    TaskCompletionMetric(model=scripted_judge).measure(case)
    (prompt,) = prompts_for(judge_server, SCHEMA)
    assert "[step 0] tool_call weather" in prompt and '{"city": "Paris"}' in prompt
    assert "Final output: Sunny." in prompt


def test_strict_mode_imperfect_becomes_zero(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, 0.9)
    metric = TaskCompletionMetric(model=scripted_judge, strict_mode=True, threshold=0.2)
    assert metric.threshold == 1.0
    assert metric.measure(case_of(support_trajectory())) == 0.0
    assert metric.success is False


def test_include_reason_off_keeps_one_call_and_no_reason(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, 0.5, [3])
    metric = TaskCompletionMetric(model=scripted_judge, include_reason=False)
    metric.measure(case_of(support_trajectory()))
    assert metric.reason is None and metric.judge_calls == 1


def test_an_empty_trajectory_without_output_is_a_missing_field(scripted_judge: Any) -> None:
    metric = TaskCompletionMetric(model=scripted_judge)
    empty = LLMTestCase(input=TASK, actual_output="", trajectory=Trajectory("agent", "t", "s"))
    assert metric.missing_fields(empty) == ["trajectory"]
    with pytest.raises(MissingFieldError):
        metric.measure(empty)
    assert metric.score is None and metric.error_type == "missing_field"


def test_no_task_anywhere_is_missing_input(scripted_judge: Any) -> None:
    metric = TaskCompletionMetric(model=scripted_judge)
    case = LLMTestCase(input="", actual_output="", trajectory=Trajectory("agent", "t", "s"))
    assert metric.missing_fields(case) == ["input", "trajectory"]
    given = TaskCompletionMetric(model=scripted_judge, task="Do it.")
    assert given.missing_fields(LLMTestCase(input="", actual_output="ok")) == []
    convo = ConversationalTestCase(turns=[Turn(role="user", content="hi")])
    assert metric.missing_fields(convo) == ["input", "trajectory"]


def test_bad_judge_json_is_an_error_never_a_score(judge_server: Any, scripted_judge: Any) -> None:
    from spanjudge.testing import Fault

    judge_server.add_rule(Fault.malformed("no json here"), schema=SCHEMA)
    metric = TaskCompletionMetric(model=scripted_judge)
    with pytest.raises(MetricError):
        metric.measure(case_of(support_trajectory()))
    assert metric.score is None and metric.error_type


def test_a_score_out_of_range_is_invalid_output_asked_again(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule(
        {"task": "t", "outcome": "o", "verdict": 7, "reason": "r"}, schema=SCHEMA, times=1
    )
    script(judge_server, 0.75)
    metric = TaskCompletionMetric(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory())) == 0.75
    assert len(judge_server.requests) >= 2


def test_empty_task_parameter_is_refused() -> None:
    with pytest.raises(ValueError, match="task"):
        TaskCompletionMetric(task="  ")


def test_clone_and_cache_identity_keep_the_task(scripted_judge: Any) -> None:
    metric = TaskCompletionMetric(task="T", threshold=0.7, model=scripted_judge)
    twin = metric.clone()
    assert twin._config()["task"] == "T" and twin.threshold == 0.7
    assert metric.cache_identity()["params"]["task"] == "T"
    assert TaskCompletionMetric(model=scripted_judge).cache_identity() != metric.cache_identity()
