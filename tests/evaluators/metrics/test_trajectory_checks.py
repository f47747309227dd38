"""Deterministic trajectory checks (issue 28 item 2): tool errors, a repeated identical call,
steps over a limit; no judge call, reasons that name the steps, usable in a Rule."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from spanjudge.errors import MissingFieldError
from spanjudge.evaluators._judge.metrics.trajectory_checks import (
    RepeatedCallCheck,
    StepLimitCheck,
    ToolErrorCheck,
)
from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case, default_case
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import find_targets
from spanjudge.evaluators._rebuild.trajectory import (
    MAX_STEPS,
    Step,
    Trajectory,
    trajectory_of,
)
from tests.evaluators.online.spans import Trace


def case_of(trajectory: Trajectory) -> LLMTestCase:
    return LLMTestCase(input="q", actual_output="a", trajectory=trajectory)


def looping_turn(times: int = 3, fail: bool = False) -> Trace:
    t = Trace()
    turn = t.agent("support", user="Where is order 7?", answer="I could not find it.")
    for _ in range(times):
        t.llm(parent=turn)
        span = t.tool("lookup_order", {"id": 7}, parent=turn)
        if fail:
            span.status_code, span.status_message = "ERROR", "order service timed out"
    t.tool("lookup_order", {"id": 8}, parent=turn)
    t.llm(parent=turn, answer="I could not find it.")
    return t


def turn_case(t: Trace) -> LLMTestCase:
    [target] = find_targets(Rule(ToolErrorCheck(), target="agent"), t.spans)
    case = default_case(target, t.spans)
    assert isinstance(case, LLMTestCase)
    return case


def test_tool_errors_fail_and_name_the_steps() -> None:
    check = ToolErrorCheck()
    assert check.measure(turn_case(looping_turn(2, fail=True))) == 0.0
    assert check.success is False
    assert check.reason == (
        "2 of 3 tool call(s) failed, 0 allowed: "
        'step 1 tool_call lookup_order {"id": 7} -> error: order service timed out; '
        'step 3 tool_call lookup_order {"id": 7} -> error: order service timed out'
    )
    assert [v["step"] for v in check.verdicts] == [1, 3]
    data = check.to_data()
    assert (data.judge_calls, data.judge_model, data.evaluation_cost) == (0, None, None)


def test_tool_errors_within_the_allowance_pass() -> None:
    check = ToolErrorCheck(max_errors=2)
    assert check.measure(turn_case(looping_turn(2, fail=True))) == 1.0
    assert check.success is True
    assert ToolErrorCheck().measure(turn_case(looping_turn(1))) == 1.0
    assert ToolErrorCheck().reason is None  # a fresh instance, never measured


def test_a_repeated_identical_call_is_a_loop() -> None:
    check = RepeatedCallCheck(max_repeats=3)
    assert check.measure(turn_case(looping_turn(3))) == 0.0
    assert check.reason == (
        'repeated identical calls, limit 3: lookup_order {"id": 7} called 3 times (steps 1, 3, 5)'
    )
    assert check.verdicts == [
        {"tool": "lookup_order", "arguments": '{"id": 7}', "steps": [1, 3, 5], "times": 3}
    ]
    assert check.measure(turn_case(looping_turn(2))) == 1.0
    assert check.reason == "no call repeated 3 times (most: 2)"


def test_argument_order_does_not_hide_a_loop() -> None:
    steps = [
        Step(0, "tool_call", "search", "a", arguments={"q": "x", "n": 1}),
        Step(1, "tool_call", "search", "b", arguments={"n": 1, "q": "x"}),
    ]
    check = RepeatedCallCheck(max_repeats=2)
    assert check.measure(case_of(Trajectory("agent", "t", "s", steps=steps))) == 0.0


def test_requested_calls_count_when_no_tool_span_was_recorded() -> None:
    from spanjudge.evaluators._rebuild.trajectory import ToolRequest

    asks = [
        Step(i, "model_call", "gpt", str(i), tool_calls=[ToolRequest("search", {"q": "x"})])
        for i in range(3)
    ]
    check = RepeatedCallCheck()
    assert check.measure(case_of(Trajectory("agent", "t", "s", steps=asks))) == 0.0
    assert "steps 0, 1, 2" in (check.reason or "")


def test_calls_whose_arguments_were_hidden_are_not_the_same_call() -> None:
    """Content capture off: two calls of one tool with unrecorded arguments are not known to be
    a loop; the same calls with the arguments recorded as empty are."""
    hidden = [
        Step(i, "tool_call", "refund", str(i), arguments=None, arguments_hidden=True)
        for i in range(3)
    ]
    check = RepeatedCallCheck(max_repeats=2)
    assert check.measure(case_of(Trajectory("agent", "t", "s", steps=hidden))) == 1.0
    assert check.reason == (
        "no call repeated 2 times (most: 0); 3 call(s) with hidden arguments "
        "(content capture off) not compared"
    )
    shown = [Step(i, "tool_call", "refund", str(i), arguments=None) for i in range(3)]
    assert check.measure(case_of(Trajectory("agent", "t", "s", steps=shown))) == 0.0


def test_requested_calls_without_arguments_are_not_compared() -> None:
    from spanjudge.evaluators._rebuild.trajectory import ToolRequest

    asks = [
        Step(i, "model_call", "gpt", str(i), tool_calls=[ToolRequest("search", None)])
        for i in range(3)
    ]
    check = RepeatedCallCheck()
    assert check.measure(case_of(Trajectory("agent", "t", "s", steps=asks))) == 1.0
    assert "3 call(s) with hidden arguments" in (check.reason or "")


def test_steps_over_the_limit_name_the_first_step_over() -> None:
    check = StepLimitCheck(max_steps=5)
    t = looping_turn(3)
    trajectory = trajectory_of(SpanTree(t.spans), t.spans[0])
    assert check.measure(case_of(trajectory)) == 0.0
    assert check.reason == (
        '8 steps, over the limit of 5; the first over: step 5 tool_call lookup_order {"id": 7}'
    )
    models = StepLimitCheck(max_steps=4, kind="model_call")
    assert models.measure(case_of(trajectory)) == 1.0
    assert models.reason == "4 model_call steps, limit 4"


def test_dropped_steps_count_against_the_limit() -> None:
    trajectory = Trajectory("agent", "t", "s", steps_dropped=5)
    trajectory.steps = [Step(i, "tool_call", "x", str(i)) for i in range(MAX_STEPS)]
    check = StepLimitCheck(max_steps=MAX_STEPS)
    assert check.measure(case_of(trajectory)) == 0.0
    assert check.reason == (
        f"{MAX_STEPS + 5} steps, over the limit of {MAX_STEPS}; the first over: 5 dropped steps"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ToolErrorCheck(max_errors=-1), "max_errors must be a non-negative integer"),
        (lambda: RepeatedCallCheck(max_repeats=1), "max_repeats must be at least 2"),
        (lambda: StepLimitCheck(kind="tools"), "kind must be one of model_call"),
        (lambda: StepLimitCheck(max_steps=True), "max_steps must be a non-negative integer"),
    ],
)
def test_bad_parameters_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_a_case_without_a_trajectory_is_a_missing_field() -> None:
    check = ToolErrorCheck()
    assert check.missing_fields(LLMTestCase(input="q", actual_output="a")) == ["trajectory"]
    with pytest.raises(MissingFieldError):
        check.measure(LLMTestCase(input="q", actual_output="a"))
    assert check.to_data().error_type == "missing_field"
    assert check.score is None


def test_checks_run_in_a_rule_on_the_rebuilt_case() -> None:
    t = looping_turn(3, fail=True)
    rule = Rule(RepeatedCallCheck(), target="agent")
    [target] = find_targets(rule, t.spans)
    case = build_case(rule, target, t.spans)
    assert isinstance(case, LLMTestCase)
    metric = rule.metric.clone()
    assert asyncio.run(metric.a_measure(case)) == 0.0
    assert rule.name == "repeated_tool_calls-agent"


def test_a_trace_target_checks_the_whole_trace() -> None:
    t = looping_turn(3)
    rule = Rule(RepeatedCallCheck(), target="trace")
    [target] = find_targets(rule, t.spans)
    case = build_case(rule, target, t.spans)
    assert isinstance(case, LLMTestCase) and case.trajectory is not None
    assert case.trajectory.scope == "trace"
    assert asyncio.run(rule.metric.clone().a_measure(case)) == 0.0


def test_clone_keeps_the_configuration() -> None:
    check = StepLimitCheck(max_steps=3, kind="tool_call", model="ignored")
    twin = check.clone()
    assert isinstance(twin, StepLimitCheck)
    assert (twin.max_steps, twin.kind) == (3, "tool_call")
    assert repr(twin) == "StepLimitCheck(max_steps=3, kind='tool_call')"
