"""The judged agent metrics online (issue 28 item 2): named in the worker's TOML with their
parameters checked and their targets enforced (errors name the key), skipped with the capture
setting when a framework recorded no content, scored on a recorded agent's rebuilt case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import spanjudge as metrics
from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.targets import Skip, find_targets
from spanjudge.settings import load_settings
from spanjudge.worker.rule_config import build_rule

AGENTS = Path(__file__).parents[2] / "interop" / "fixtures" / "agents"

TRACE_LEVEL = [
    ("task_completion", metrics.TaskCompletionMetric),
    ("tool_correctness", metrics.ToolCorrectnessMetric),
    ("argument_correctness", metrics.ArgumentCorrectnessMetric),
    ("step_efficiency", metrics.StepEfficiencyMetric),
    ("plan_adherence", metrics.PlanAdherenceMetric),
    ("plan_quality", metrics.PlanQualityMetric),
]


def rule_from(entry: dict[str, Any]) -> Any:
    settings = load_settings(
        None, store_url="sqlite:///:memory:", judge_model="openai/x", rules=[entry]
    )
    return build_rule(settings.rules[0], "openai/scripted-judge", 0)


@pytest.mark.parametrize(("name", "cls"), TRACE_LEVEL)
@pytest.mark.parametrize("target", ["agent", "trace"])
def test_each_trace_level_metric_is_a_toml_rule(name: str, cls: type, target: str) -> None:
    rule = rule_from({"metric": name, "target": target, "params": {"threshold": 0.7}})
    assert isinstance(rule.metric, cls)
    assert rule.metric.threshold == 0.7 and rule.name == f"{name}-{target}"


@pytest.mark.parametrize(("name", "cls"), TRACE_LEVEL)
def test_a_trace_level_metric_on_an_llm_span_names_the_target_key(name: str, cls: type) -> None:
    with pytest.raises(ConfigError, match=r"rules\.0\.target: metric .* 'agent' or 'trace'"):
        rule_from({"metric": name, "target": "llm"})


def test_goal_accuracy_runs_on_conversations_only() -> None:
    rule = rule_from({"metric": "goal_accuracy", "target": "conversation"})
    assert isinstance(rule.metric, metrics.GoalAccuracyMetric)
    with pytest.raises(ConfigError, match=r"rules\.0\.target: .*'conversation', got 'agent'"):
        rule_from({"metric": "goal_accuracy", "target": "agent"})


def test_parameters_are_checked_by_name() -> None:
    rule = rule_from(
        {
            "metric": "tool_correctness",
            "target": "agent",
            "params": {
                "available_tools": ["search", {"name": "calc", "description": "adds"}],
                "evaluation_params": ["input_parameters"],
                "should_consider_ordering": True,
            },
        }
    )
    assert [t.name for t in rule.metric.available_tools] == ["search", "calc"]
    rule = rule_from({"metric": "task_completion", "target": "trace", "params": {"task": "T"}})
    assert rule.metric._config()["task"] == "T"
    with pytest.raises(ConfigError, match=r"rules\.0\.params\.tasks: unknown parameter"):
        rule_from({"metric": "task_completion", "target": "agent", "params": {"tasks": "T"}})
    with pytest.raises(ConfigError, match="evaluation_params: unknown value 'speed'"):
        rule_from(
            {"metric": "tool_correctness", "target": "agent",
             "params": {"evaluation_params": ["speed"]}}
        )  # fmt: skip


def recorded(name: str) -> dict[str, list[SpanRecord]]:
    spans = [
        s
        for p in sorted((AGENTS / name).glob("*.pb"))
        for s in decode_traces(p.read_bytes(), PROTOBUF)
    ]
    traces: dict[str, list[SpanRecord]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    return traces


@pytest.mark.parametrize(("name", "cls"), TRACE_LEVEL)
def test_a_framework_without_content_is_skipped_naming_its_setting(name: str, cls: Any) -> None:
    rule = Rule(cls(model="openai/scripted-judge"), target="agent")
    reasons = [
        build_case(rule, target, spans)
        for spans in recorded("agent-pydantic-ai-nocontent").values()
        for target in find_targets(rule, spans)
    ]
    assert reasons and all(isinstance(r, Skip) for r in reasons)
    assert all("missing input" in r.reason for r in reasons if isinstance(r, Skip))
    assert all("include_content=False" in r.reason for r in reasons if isinstance(r, Skip))


def test_a_recorded_agent_turn_is_scored_from_its_trajectory(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule(
        {"task": "t", "outcome": "o", "verdict": 0.5, "reason": "r.", "steps": [1]},
        schema="TaskCompletionVerdict",
    )
    rule = Rule(metrics.TaskCompletionMetric(model=scripted_judge), target="agent")
    cases = [
        build_case(rule, target, spans)
        for spans in recorded("agent-pydantic-ai").values()
        for target in find_targets(rule, spans)
    ]
    case = next(c for c in cases if isinstance(c, LLMTestCase) and c.trajectory.tool_calls)
    assert rule.metric.measure(case) == 0.5
    (prompt,) = [r.prompt for r in judge_server.requests]
    first_tool = case.trajectory.tool_calls[0]
    assert f"[step {first_tool.index}] tool_call {first_tool.name}" in prompt
    assert "Steps that lowered the score: step 1 (" in (rule.metric.reason or "")


def test_the_judge_cache_keys_agent_metrics_by_the_trajectory() -> None:
    from spanjudge.evaluators._loop.result_cache import cache_key
    from tests.evaluators.metrics.agentic_support import case_of, support_trajectory

    metric = metrics.TaskCompletionMetric(model="openai/scripted-judge")
    failing, fixed = support_trajectory(), support_trajectory()
    fixed.steps[3].error = None
    assert cache_key(metric, case_of(failing)) != cache_key(metric, case_of(fixed))
    # the same steps read from another trace share the entry: ids are provenance
    moved = support_trajectory()
    moved.trace_id, moved.span_id = "other-trace", "other-span"
    for step in moved.steps:
        step.span_id = "x" + step.span_id
    assert cache_key(metric, case_of(moved)) == cache_key(metric, case_of(failing))
    # a metric that does not read the trajectory keeps its key
    bias = metrics.BiasMetric(model="openai/scripted-judge")
    assert cache_key(bias, case_of(failing)) == cache_key(bias, case_of(fixed))


@pytest.mark.parametrize(("name", "cls"), TRACE_LEVEL)
def test_a_python_rule_refuses_an_agent_metric_on_an_llm_span(name: str, cls: Any) -> None:
    with pytest.raises(ValueError, match=r"Rule\.target: metric .* 'agent' or 'trace', got 'llm'"):
        Rule(cls(model="openai/scripted-judge"), target="llm")
    assert Rule(cls(model="openai/scripted-judge"), target="trace").target == "trace"
