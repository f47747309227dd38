"""The one trajectory rendering the judged agent metrics share (issue 28 item 2): every cut is
bounded and visible, a 10,000-step trajectory renders no more steps than the limit, and cases
without a trajectory are read from their fields."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.evaluators._judge.metrics import agent_text
from spanjudge.evaluators._judge.metrics.agent_text import (
    HEAD_STEPS,
    MAX_RENDER_CHARS,
    MAX_RENDER_STEPS,
    MAX_TOOLS,
    AgentView,
    agent_view,
    cut,
    render_steps,
    render_tools,
)
from spanjudge.evaluators._judge.metrics.task_completion import TaskCompletionMetric
from spanjudge.evaluators._judge.test_case import LLMTestCase, ToolCall
from spanjudge.evaluators._rebuild.trajectory import (
    Step,
    ToolDefinition,
    ToolRequest,
    Trajectory,
)
from tests.evaluators.metrics.agentic_support import case_of, long_trajectory
from tests.evaluators.metrics.conftest import prompts_for


def test_a_long_value_is_cut_with_a_marker() -> None:
    assert cut("abc", 5) == "abc"
    assert cut("x" * 1_000, 10) == "x" * 10 + "...[cut 990 chars]"
    assert cut({"k": "v"}) == '{"k": "v"}'


def test_ten_thousand_steps_render_head_tail_and_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[int] = []
    real = agent_text._render_step

    def counting(step: Any, limit: int = 600) -> str:
        rendered.append(step.index)
        return real(step, limit)

    monkeypatch.setattr(agent_text, "_render_step", counting)
    view = agent_view(case_of(long_trajectory(10_000)))
    text = render_steps(view)
    # only the steps shown are read: bounded work and memory whatever the length
    assert len(rendered) == MAX_RENDER_STEPS
    assert rendered[:3] == [0, 1, 2] and rendered[-1] == 9_999
    hidden = 10_000 - MAX_RENDER_STEPS
    last_hidden = 10_000 - (MAX_RENDER_STEPS - HEAD_STEPS) - 1
    assert f"[... {hidden} steps not shown (steps {HEAD_STEPS} to {last_hidden}) ...]" in text
    assert "[... 25 later steps were not recorded (reader limit) ...]" in text
    assert "[step 9999] tool_call search" in text
    assert "...[cut " in text  # the 5,000-character results
    assert len(text) <= MAX_RENDER_CHARS + 10_000


def test_the_size_limit_stops_with_a_marker() -> None:
    requests = [ToolRequest(f"tool{i}", {"q": "y" * 500}) for i in range(40)]
    steps = [Step(i, "model_call", "gpt", str(i), tool_calls=requests) for i in range(100)]
    text = render_steps(AgentView("task", "out", steps))
    assert "more steps not shown: prompt size limit reached ...]" in text
    assert len(text) <= MAX_RENDER_CHARS + 10_000
    assert text.endswith("Final output: out")


def test_tools_list_is_cut_with_a_marker() -> None:
    tools = [ToolDefinition(f"t{i}", "d" * 500, {"type": "object"}) for i in range(MAX_TOOLS + 7)]
    text = render_tools(AgentView(None, None, [], tools))
    assert text.count("\n- ") + 1 == MAX_TOOLS
    assert text.endswith("[... 7 more tools not shown]")
    assert "...[cut 300 chars]" in text
    assert render_tools(AgentView(None, None, [])) == "(none recorded)"


def test_every_step_kind_shows_what_it_carries() -> None:
    steps = [
        Step(0, "plan", "plan", "p", result="1. search"),
        Step(1, "model_call", "gpt", "m", agent="triage", tool_calls=[ToolRequest("search", {})]),
        Step(2, "retrieval", "docs", "r", result=["doc one"]),
        Step(3, "handoff", "transfer", "h", handoff_from="triage", handoff_to="billing"),
        Step(4, "tool_call", "search", "t", arguments={"q": 1}, error="Timeout"),
    ]
    text = render_steps(AgentView("task", None, steps))
    assert "[step 0] plan plan\n  output: 1. search" in text
    assert "[step 1] model_call gpt (agent triage)\n  requests tool search: {}" in text
    assert '[step 2] retrieval docs\n  result: ["doc one"]' in text
    assert "hand-off: triage -> billing" in text
    assert '[step 4] tool_call search\n  arguments: {"q": 1}\n  ERROR: Timeout' in text
    assert text.endswith("Final output: (none recorded)")


def test_a_case_without_trajectory_is_read_from_its_fields() -> None:
    case = LLMTestCase(
        input=" q ",
        actual_output="a",
        tools_called=[ToolCall(name="calc", input_parameters={"x": 1}, output=2)],
    )
    view = agent_view(case)
    assert (view.task, view.final_output) == ("q", "a")
    assert [(s.index, s.kind, s.name, s.arguments, s.result) for s in view.steps] == [
        (0, "tool_call", "calc", {"x": 1}, 2)
    ]


def test_the_trajectory_task_falls_back_to_the_case_input() -> None:
    view = agent_view(
        LLMTestCase(input="from input", actual_output="", trajectory=Trajectory("agent", "t", "s"))
    )
    assert view.task == "from input" and view.steps == []


def test_a_ten_thousand_step_trajectory_is_judged_with_a_bounded_prompt(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule(
        {"task": "t", "outcome": "o", "verdict": 0.0, "reason": "looped.", "steps": [9_999]},
        schema="TaskCompletionVerdict",
    )
    metric = TaskCompletionMetric(model=scripted_judge)
    assert metric.measure(case_of(long_trajectory(10_000))) == 0.0
    (prompt,) = prompts_for(judge_server, "TaskCompletionVerdict")
    assert len(prompt) < MAX_RENDER_CHARS + 20_000
    assert "[step 9999] tool_call search" in prompt
    assert metric.reason == "looped. Steps that lowered the score: step 9999 (tool_call search)."
