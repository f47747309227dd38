"""ToolCorrectnessMetric (issue 28 item 2): referenceless, one call gives each tool call a
verdict (score = right / judged); with expected tools, deepeval's deterministic formula, and the
lower of the two when available_tools is given."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.errors import MetricError
from spanjudge.evaluators._judge.metrics.tool_correctness import ToolCorrectnessMetric
from spanjudge.evaluators._judge.test_case import LLMTestCase, ToolCall
from spanjudge.evaluators._rebuild.trajectory import Step, ToolRequest, Trajectory
from tests.evaluators.metrics.agentic_support import TASK, case_of, support_trajectory
from tests.evaluators.metrics.conftest import prompts_for, schema_names

SCHEMA = "ToolSelectionVerdicts"


def script(server: Any, verdicts: list[str], **extra: Any) -> None:
    server.add_rule(
        {
            "verdicts": [
                {"step": i, "verdict": v, "reason": f"call {i} {v}"} for i, v in enumerate(verdicts)
            ],
            "reason": "scripted reason.",
        },
        schema=SCHEMA,
        **extra,
    )


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [(["yes", "yes", "yes"], 1.0), (["yes", "no", "yes"], 2 / 3), (["NO ", "no", "Yes"], 1 / 3)],
)
def test_referenceless_score_is_right_calls_over_calls(
    judge_server: Any, scripted_judge: Any, verdicts: list[str], expected: float
) -> None:
    script(judge_server, verdicts)
    metric = ToolCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory())) == pytest.approx(expected)
    assert schema_names(judge_server) == [SCHEMA] and metric.judge_calls == 1
    assert [d["tool"] for d in metric.to_data().verdicts] == [
        "lookup_order",
        "cancel_order",
        "send_email",
    ]


def test_reason_names_the_wrong_calls_by_step_and_tool(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["yes", "no", "yes"])
    metric = ToolCorrectnessMetric(model=scripted_judge)
    metric.measure(case_of(support_trajectory()))
    assert metric.reason is not None
    assert metric.reason.startswith("2 of 3 tool calls were the right choice.")
    assert "step 2 (tool_call cancel_order)" in metric.reason
    assert "send_email" not in metric.reason


def test_the_prompt_lists_available_tools_and_the_calls_to_judge(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["yes"] * 3)
    ToolCorrectnessMetric(model=scripted_judge).measure(case_of(support_trajectory()))
    (prompt,) = prompts_for(judge_server, SCHEMA)
    assert "- refund_order: Refund an order" in prompt  # from the trajectory
    assert "Tool calls to judge (3):" in prompt
    assert '3. [step 3] send_email arguments: {"to": "me"}' in prompt


def test_available_tools_given_replace_the_recorded_ones(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["yes"] * 3)
    metric = ToolCorrectnessMetric(
        available_tools=[ToolCall(name="crm_lookup", description="CRM"), "mailer"],
        model=scripted_judge,
    )
    metric.measure(case_of(support_trajectory()))
    (prompt,) = prompts_for(judge_server, SCHEMA)
    assert "- crm_lookup: CRM" in prompt and "- mailer" in prompt
    assert "- refund_order" not in prompt


def test_no_tool_call_scores_one_without_a_judge_call(
    judge_server: Any, scripted_judge: Any
) -> None:
    steps = [Step(0, "model_call", "gpt", "m", result="hello")]
    case = case_of(Trajectory("agent", "t", "s", task=TASK, final_output="hello", steps=steps))
    metric = ToolCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case) == 1.0
    assert judge_server.requests == [] and metric.judge_calls == 0
    assert metric.reason == "No tool was called, so no tool choice was wrong."


def test_requested_calls_are_judged_when_no_tool_span_was_recorded(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["no"])
    steps = [Step(0, "model_call", "gpt", "m", tool_calls=[ToolRequest("search", {"q": "x"})])]
    case = case_of(Trajectory("agent", "t", "s", task=TASK, steps=steps))
    metric = ToolCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case) == 0.0
    assert "step 0 (tool_request search)" in (metric.reason or "")


def test_a_wrong_verdict_count_is_asked_again(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes"], times=1)
    script(judge_server, ["yes", "yes", "no"])
    metric = ToolCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case_of(support_trajectory())) == pytest.approx(2 / 3)
    assert len(judge_server.requests) >= 2


def test_bad_judge_json_is_an_error(judge_server: Any, scripted_judge: Any) -> None:
    from spanjudge.testing import Fault

    judge_server.add_rule(Fault.malformed("{verdicts: nope"), schema=SCHEMA)
    metric = ToolCorrectnessMetric(model=scripted_judge)
    with pytest.raises(MetricError):
        metric.measure(case_of(support_trajectory()))
    assert metric.score is None


# ---------------------------------------------------------------------- expected tools
def expected_case(called: list[ToolCall], expected: list[ToolCall]) -> LLMTestCase:
    return LLMTestCase(input=TASK, actual_output="ok", tools_called=called, expected_tools=expected)


A, B, C = ToolCall(name="a"), ToolCall(name="b"), ToolCall(name="c")


@pytest.mark.parametrize(
    ("called", "expected", "options", "score"),
    [
        ([A, B], [A, B], {}, 1.0),
        ([A], [A, B], {}, 0.5),
        ([A, B, C], [A, B], {}, 1.0),  # extra calls cost nothing (deepeval's formula)
        ([], [], {}, 1.0),
        ([A], [], {}, 0.0),
        ([B, A], [A, B], {"should_consider_ordering": True}, 0.5),
        ([A, C, B], [A, B], {"should_consider_ordering": True}, 1.0),
        ([A, B], [A, B], {"should_exact_match": True}, 1.0),
        ([A, B, C], [A, B], {"should_exact_match": True}, 0.0),
        ([B, A], [A, B], {"should_exact_match": True}, 0.0),
    ],
)
def test_expected_tools_use_deepeval_deterministic_formula_without_a_call(
    judge_server: Any,
    scripted_judge: Any,
    called: list[ToolCall],
    expected: list[ToolCall],
    options: dict[str, Any],
    score: float,
) -> None:
    metric = ToolCorrectnessMetric(model=scripted_judge, **options)
    assert metric.measure(expected_case(called, expected)) == pytest.approx(score)
    assert judge_server.requests == []


def test_input_parameters_count_as_a_share_of_matching_keys(
    judge_server: Any, scripted_judge: Any
) -> None:
    called = [ToolCall(name="a", input_parameters={"x": 1, "y": 2})]
    expected = [ToolCall(name="a", input_parameters={"x": 1, "y": 3})]
    metric = ToolCorrectnessMetric(model=scripted_judge, evaluation_params=["input_parameters"])
    assert metric.measure(expected_case(called, expected)) == pytest.approx(0.5)
    exact = ToolCorrectnessMetric(
        model=scripted_judge, evaluation_params=["input_parameters"], should_exact_match=True
    )
    assert exact.measure(expected_case(called, expected)) == 0.0
    output = ToolCorrectnessMetric(model=scripted_judge, evaluation_params=["output"])
    got = [ToolCall(name="a", output=1)]
    assert output.measure(expected_case(got, [ToolCall(name="a", output=2)])) == 0.0


def test_expected_tools_with_available_tools_take_the_lower_score(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["yes", "no"])
    metric = ToolCorrectnessMetric(available_tools=["a", "b", "c"], model=scripted_judge)
    assert metric.measure(expected_case([A, B], [A, B])) == 0.5
    assert metric.expected_score == 1.0 and metric.selection_score == 0.5
    assert "Every expected tool was called" in (metric.reason or "")
    assert "step 1 (tool_call b)" in (metric.reason or "")


def test_expected_tools_are_matched_against_the_trajectory(
    judge_server: Any, scripted_judge: Any
) -> None:
    case = case_of(support_trajectory(), expected_tools=[ToolCall(name="refund_order")])
    metric = ToolCorrectnessMetric(model=scripted_judge)
    assert metric.measure(case) == 0.0
    assert "not called: ['refund_order']" in (metric.reason or "")


def test_bad_parameters_name_the_key() -> None:
    with pytest.raises(ValueError, match="evaluation_params: unknown value 'speed'"):
        ToolCorrectnessMetric(evaluation_params=["speed"])
    with pytest.raises(ValueError, match="available_tools"):
        ToolCorrectnessMetric(available_tools=[3])  # type: ignore[list-item]
