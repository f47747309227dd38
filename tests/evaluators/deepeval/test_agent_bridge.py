"""deepeval's own agent metrics as rules (issue 28 item 3): the bridge builds the trace they read
from our trajectory, so each runs online on recorded spans of any framework, through the real
Monitor, judged by our engine against a scripted judge. The tests check what deepeval's prompts
received (the steps, in order) and the score deepeval computed from the scripted answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from deepeval.metrics import (
    AgentLoopDetectionMetric,
    PlanAdherenceMetric,
    PlanQualityMetric,
    StepEfficiencyMetric,
    TaskCompletionMetric,
)
from deepeval.utils import serialize_to_json

from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.deepeval_bridge.model import as_deepeval_model
from spanjudge.evaluators._judge.deepeval_bridge.trace_dict import MAX_DEPTH, trace_dict
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.trajectory import MAX_STEPS, Step, Trajectory
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.cache.conftest import Loop
from tests.evaluators.deepeval.agent_support import (
    FRAMEWORKS,
    LOOP,
    TWO_TOOLS,
    agent_case,
    requested,
    run_rules,
    tool_steps,
    turn_spans,
    walk,
)
from tests.evaluators.online.spans import Trace
from tests.support.clock import Clock

A1001 = {"order_id": "A-1001"}
REFUND = {"order_id": "A-1001", "amount": 12.5}


def sent_trace(prompt: str) -> dict[str, Any]:
    """The trace JSON deepeval put in a prompt: the last JSON object starting a line (the
    templates show an example trace before the one judged)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    at = prompt.find("\n{\n")
    while at >= 0:
        try:
            value, _ = decoder.raw_decode(prompt[at + 1 :])
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict) and "children" in value:
            found.append(value)
        at = prompt.find("\n{\n", at + 1)
    assert found, "no trace in the prompt"
    return found[-1]


# ============================================================ the trace dict itself
def test_a_turn_becomes_deepeval_spans_in_the_order_they_ran() -> None:
    case = agent_case(turn_spans("openai-agents", TWO_TOOLS))
    trace = json.loads(serialize_to_json(trace_dict(case.trajectory)))
    assert (trace["type"], trace["name"]) == ("agent", "support-agent")
    assert trace["input"].startswith("What is the status of order A-1001?")
    assert trace["output"].startswith("Order A-1001 (blender) was delivered")
    assert [(s["type"], s["name"]) for s in walk(trace)] == [
        ("llm", "gpt-4o-mini"),
        ("tool", "lookup_order"),
        ("llm", "gpt-4o-mini"),
        ("tool", "refund"),
        ("llm", "gpt-4o-mini"),
    ]
    first, lookup, _, refund, last = walk(trace)
    assert first["output"]["tool_calls"] == [
        {"name": "lookup_order", "args": A1001, "id": "call_t1s_0_0"}
    ]
    assert (lookup["input"], lookup["output"]) == (
        A1001,
        "Order A-1001: blender, delivered on 2026-05-03, total 62.40.",
    )
    assert (refund["input"], refund["output"]) == (REFUND, "Refunded 12.50 on order A-1001.")
    assert last["output"] == trace["output"]
    # deepeval's converter dropped what it never shows a metric
    assert not {"uuid", "status", "start_time", "metadata"} & set(first)


def test_a_handoff_nests_the_second_agents_steps_under_it() -> None:
    case = agent_case(turn_spans("openai-agents", 1))
    trace = json.loads(serialize_to_json(trace_dict(case.trajectory)))
    support, billing = [s for s in trace["children"] if s["type"] == "agent"]
    assert (support["name"], billing["name"]) == ("support-agent", "billing-agent")
    handoff = next(s for s in walk(support) if s["type"] == "tool")
    assert handoff["input"] == {"from": "support-agent", "to": "billing-agent"}
    assert support["agent_handoffs"] == ["billing-agent"]
    assert [s["name"] for s in walk(billing) if s["type"] == "tool"] == ["refund"]


def test_tool_errors_cut_steps_and_notes_stay_visible() -> None:
    case = agent_case(turn_spans("strands", 2))
    trajectory = case.trajectory
    trace = json.loads(serialize_to_json(trace_dict(trajectory)))
    [(name, arguments, error)] = tool_steps(trace)
    assert (name, arguments) == ("refund", {"order_id": "A-1003", "amount": 80.0})
    assert "exceeds the order total of 45.00" in error
    trajectory.steps_dropped = 7
    trajectory.notes.append("2 span(s) whose parent is missing, read in time order")
    trace = json.loads(serialize_to_json(trace_dict(trajectory)))
    notes = trace["children"][-1]
    assert (notes["type"], notes["name"]) == ("base", "notes")
    assert notes["output"].splitlines() == [
        "7 more step(s) not shown (cut by spanjudge)",
        "2 span(s) whose parent is missing, read in time order",
    ]


# ============================================================ each metric through a Rule
def script_task_completion(server: ScriptedJudgeServer, verdict: float) -> None:
    server.add_rule(
        {"task": "Report order A-1001 and refund its shipping.", "outcome": "Both done."},
        schema="TaskAndOutcome",
    )
    server.add_rule(
        {"verdict": verdict, "reason": "The order was reported and refunded."},
        schema="TaskCompletionVerdict",
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_task_completion_runs_on_every_frameworks_spans(
    framework: str, store: SpanStore, loop: Loop, clock: Clock
) -> None:
    spans = turn_spans(framework, TWO_TOOLS)
    with ScriptedJudgeServer() as server:
        script_task_completion(server, 0.75)
        metric = TaskCompletionMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, spans, [Rule(metric, target="agent")])
        requests = list(server.requests)
    assert [r.schema_name for r in requests] == ["TaskAndOutcome", "TaskCompletionVerdict"]
    trace = sent_trace(requests[0].prompt)
    assert trace["type"] == "agent"
    read = agent_case(spans).trajectory  # what our rebuild read is what deepeval was shown
    assert (trace["input"], trace["output"]) == (read.task, read.final_output)
    tools = [(name, arguments) for name, arguments, _ in tool_steps(trace)]
    assert [name for name, _ in tools] == ["lookup_order", "refund"]
    assert tools[1][1] == REFUND
    assert tools[0][1] in (A1001, "A-1001")  # LangGraph's tool node records the bare value
    types = [s["type"] for s in walk(trace)]
    assert types.count("llm") == 3 and types.index("tool") > types.index("llm")
    if framework not in ("crewai", "langgraph"):  # their model spans carry no tool requests
        assert requested(trace) == [("lookup_order", A1001), ("refund", REFUND)]
    assert "Report order A-1001" in requests[1].prompt  # the task deepeval extracted
    assert result.metric == "deepeval_task_completion"
    assert (result.status, result.score, result.label) == ("scored", 0.75, "pass")
    assert result.reason == "The order was reported and refunded."
    assert result.judge_calls == 2


def test_step_efficiency_sees_the_loop(store: SpanStore, loop: Loop, clock: Clock) -> None:
    spans = turn_spans("pydantic-ai", LOOP)
    with ScriptedJudgeServer() as server:
        server.add_rule({"task": "Find order A-1004."}, schema="Task")
        server.add_rule(
            {"score": 0.4, "reason": "lookup_order was called three times with one id."},
            schema="EfficiencyVerdict",
        )
        metric = StepEfficiencyMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, spans, [Rule(metric, target="agent")])
        requests = list(server.requests)
    assert [r.schema_name for r in requests] == ["Task", "EfficiencyVerdict"]
    trace = sent_trace(requests[1].prompt)
    assert tool_steps(trace) == [("lookup_order", {"order_id": "A-1004"}, None)] * 3
    assert (result.score, result.label) == (0.4, "fail")
    assert result.reason == "lookup_order was called three times with one id."


@pytest.mark.parametrize("metric_class", [PlanAdherenceMetric, PlanQualityMetric])
def test_plan_metrics_without_a_plan_score_one_as_deepeval_does(
    metric_class: Any, store: SpanStore, loop: Loop, clock: Clock
) -> None:
    spans = turn_spans("strands", TWO_TOOLS)
    with ScriptedJudgeServer() as server:
        server.add_rule({"task": "Report and refund order A-1001."}, schema="Task")
        server.add_rule({"plan": []}, schema="AgentPlan")
        metric = metric_class(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, spans, [Rule(metric, target="agent")])
        schemas = [r.schema_name for r in server.requests]
        plan_prompt = server.requests[1].prompt
    assert schemas == ["Task", "AgentPlan"]
    assert [n for n, _, _ in tool_steps(sent_trace(plan_prompt))] == ["lookup_order", "refund"]
    assert (result.status, result.score) == ("scored", 1.0)
    assert "no plans to evaluate" in (result.reason or "")


@pytest.mark.parametrize(
    ("metric_class", "schema"),
    [(PlanAdherenceMetric, "PlanAdherenceScore"), (PlanQualityMetric, "PlanQualityScore")],
)
def test_plan_metrics_judge_a_plan_found_in_the_trace(
    metric_class: Any, schema: str, store: SpanStore, loop: Loop, clock: Clock
) -> None:
    spans = turn_spans("openai-agents", TWO_TOOLS)
    plan = ["Look up order A-1001.", "Refund its shipping fee."]
    with ScriptedJudgeServer() as server:
        server.add_rule({"task": "Report and refund order A-1001."}, schema="Task")
        server.add_rule({"plan": plan}, schema="AgentPlan")
        server.add_rule({"score": 0.9, "reason": "The plan was followed."}, schema=schema)
        metric = metric_class(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, spans, [Rule(metric, target="agent")])
        requests = list(server.requests)
    assert [r.schema_name for r in requests] == ["Task", "AgentPlan", schema]
    assert "\n".join(plan) in requests[2].prompt
    if metric_class is PlanAdherenceMetric:  # adherence compares the plan with the trace
        assert [n for n, _, _ in tool_steps(sent_trace(requests[2].prompt))] == [
            "lookup_order",
            "refund",
        ]
    assert (result.score, result.label, result.reason) == (0.9, "pass", "The plan was followed.")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_deepevals_loop_detection_finds_the_looping_turn(
    framework: str, store: SpanStore, loop: Loop, clock: Clock
) -> None:
    """deepeval's deterministic loop metric reads only the trace: no judge, and the three
    identical lookups of the looping turn found in every framework's spans."""
    spans = turn_spans(framework, LOOP) + turn_spans(framework, TWO_TOOLS)
    rule = Rule(AgentLoopDetectionMetric(threshold=0.9), target="agent")
    results = run_rules(loop, store, clock, spans, [rule])
    by_score = {r.score: r for r in results}
    assert sorted(by_score) == [0.8, 1.0]
    looping = by_score[0.8]
    assert (looping.label, looping.judge_calls) == ("fail", 0)
    assert looping.reason == "Tool 'lookup_order' called 3 times with identical arguments."
    assert by_score[1.0].reason == "No loop patterns detected."


def test_the_longest_trajectory_stays_bounded_with_its_cut_said() -> None:
    steps = [
        Step(i, "tool_call", "lookup_order", f"s{i}", arguments={"order_id": f"A-{i}"}, result="ok")
        for i in range(MAX_STEPS)
    ]
    kept = Trajectory("agent", "t", "s", task="Find my orders.", agent="support", steps=steps)
    kept.steps_dropped = 9_000
    trace = json.loads(serialize_to_json(trace_dict(kept)))
    assert len(trace["children"]) == MAX_STEPS + 1
    assert trace["children"][-2]["input"] == {"order_id": f"A-{MAX_STEPS - 1}"}
    assert trace["children"][-1]["output"] == "9000 more step(s) not shown (cut by spanjudge)"


def test_agents_nested_past_the_depth_limit_stay_at_the_limit() -> None:
    """Each agent invoked by the one before it, 500 deep: the trace nests 32 levels (deepeval
    recurses per level) and keeps every step."""
    steps = [Step(i, "agent", f"agent-{i}", f"s{i}", agent=f"agent-{i - 1}") for i in range(500)]
    deep = Trajectory("agent", "t", "s", task="Go deep.", agent="agent--1", steps=steps)
    trace = json.loads(serialize_to_json(trace_dict(deep)))
    levels, span = 0, trace
    while span["children"] and span["children"][0]["type"] == "agent":
        span, levels = span["children"][0], levels + 1
    assert levels == MAX_DEPTH
    assert len(walk(trace)) == 500


# ============================================================ skipped, never guessed
def test_a_turn_without_steps_is_skipped_naming_the_trajectory(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    trace = Trace(service="shop")
    trace.agent(user="Where is order 7?", answer="It ships tomorrow.")
    with ScriptedJudgeServer() as server:
        metric = TaskCompletionMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, trace.spans, [Rule(metric, target="agent")])
        assert server.requests == []
    assert (result.status, result.score) == ("skipped", None)
    assert result.skip_reason == "missing trajectory: not found in the spans"


def test_spans_without_content_are_skipped_naming_the_setting(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    spans = turn_spans("pydantic-ai-nocontent", TWO_TOOLS)
    with ScriptedJudgeServer() as server:
        metric = StepEfficiencyMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, spans, [Rule(metric, target="agent")])
        assert server.requests == []
    assert result.status == "skipped"
    assert "InstrumentationSettings(include_content=False)" in (result.skip_reason or "")
