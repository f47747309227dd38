"""deepeval's tool and conversation agent metrics as rules (issue 28 item 3): Argument
Correctness and Tool Correctness on recorded agent turns, Goal Accuracy and Tool Use on a
conversation whose turns called tools; the tools the model was offered, read from the spans,
stand in for ``available_tools`` when the metric was given none."""

from __future__ import annotations

import json
from typing import Any

from deepeval.metrics import (
    AnswerRelevancyMetric,
    ArgumentCorrectnessMetric,
    GoalAccuracyMetric,
    TaskCompletionMetric,
    ToolCorrectnessMetric,
    ToolUseMetric,
)
from deepeval.test_case import ToolCall as DeepEvalToolCall

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.deepeval_bridge.metric import DeepEvalMetric
from spanjudge.evaluators._judge.deepeval_bridge.model import as_deepeval_model
from spanjudge.evaluators._judge.test_case import LLMTestCase, ToolCall
from spanjudge.evaluators._loop.result_cache import cache_key
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import default_case
from spanjudge.evaluators._rebuild.targets import Target
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.cache.conftest import Loop
from tests.evaluators.deepeval.agent_support import (
    TOOL_ERROR,
    TWO_TOOLS,
    agent_case,
    run_rules,
    turn_spans,
)
from tests.evaluators.online.spans import Trace
from tests.support.clock import Clock

OFFERED = json.dumps(
    [
        {"type": "function", "name": "lookup_order", "description": "Find an order by id."},
        {"type": "function", "name": "refund", "description": "Refund an amount on an order."},
    ]
)


def test_argument_correctness_judges_the_failed_calls_arguments(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    spans = turn_spans("strands", TOOL_ERROR)
    with ScriptedJudgeServer() as server:
        server.add_rule(
            {"verdicts": [{"verdict": "no", "reason": "80.00 is more than the order's 45.00"}]},
            schema="Verdicts",
        )
        server.add_rule(
            {"reason": "The refund asked for more than was paid."},
            schema="ArgumentCorrectnessScoreReason",
        )
        metric = ArgumentCorrectnessMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, spans, [Rule(metric, target="agent")])
        requests = list(server.requests)
    assert [r.schema_name for r in requests] == ["Verdicts", "ArgumentCorrectnessScoreReason"]
    assert "Please refund 80.00 for order A-1003." in requests[0].prompt
    assert '"order_id": "A-1003",\n        "amount": 80.0' in requests[0].prompt
    assert (result.score, result.label) == (0.0, "fail")
    assert result.reason == "The refund asked for more than was paid."
    assert [v["verdict"] for v in result.verdicts or []] == ["no"]


def test_tool_correctness_online_is_skipped_for_want_of_expected_tools(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    spans = turn_spans("strands", TWO_TOOLS)
    with ScriptedJudgeServer() as server:
        metric = ToolCorrectnessMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = run_rules(loop, store, clock, spans, [Rule(metric, target="agent")])
        assert server.requests == []
    assert result.status == "skipped"
    assert (result.skip_reason or "").startswith("missing expected_tools:")


def expecting(*names: str) -> Any:
    """A ``build_case`` giving the rebuilt case the expected tools (as a team with a golden
    path would)."""

    def build(spans: list[SpanRecord], target: Target) -> Any:
        case = default_case(target, spans)
        assert isinstance(case, LLMTestCase)
        return case.model_copy(update={"expected_tools": [ToolCall(name=n) for n in names]})

    return build


def test_tool_correctness_gets_the_offered_tools_from_the_spans(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    spans = turn_spans("strands", TWO_TOOLS)  # strands records the agent's tools
    with ScriptedJudgeServer() as server:
        server.add_rule(
            {"score": 0.5, "reason": "refund was not needed to report a status."},
            schema="ToolSelectionScore",
        )
        metric = ToolCorrectnessMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        rule = Rule(metric, target="agent", build_case=expecting("lookup_order", "refund"))
        [result] = run_rules(loop, store, clock, spans, [rule])
        requests = list(server.requests)
    assert [r.schema_name for r in requests] == ["ToolSelectionScore"]
    for name in ("lookup_order", "refund", "handoff_to_agent"):  # offered, read from the spans
        assert f'"name": "{name}"' in requests[0].prompt
    # both expected tools were called (1.0); deepeval keeps the lower of that and the selection
    assert (result.score, result.label) == (0.5, "pass")
    assert metric.available_tools is None  # the rule's own metric is never filled in


def test_tool_correctness_keeps_the_tools_its_author_gave() -> None:
    given = [DeepEvalToolCall(name="cancel_order")]
    with ScriptedJudgeServer() as server:
        bridged = DeepEvalMetric(
            ToolCorrectnessMetric(available_tools=given, model=as_deepeval_model(server.judge()))
        )
        assert bridged.fills_tools is False
        empty = DeepEvalMetric(ToolCorrectnessMetric(model=as_deepeval_model(server.judge())))
        assert empty.fills_tools is True and empty.clone().fills_tools is True


# ============================================================ conversations
def conversation_spans() -> list[SpanRecord]:
    """Two turns of one conversation; each agent turn calls a tool the model was offered."""
    spans: list[SpanRecord] = []
    turns = [
        ("Where is order A-7?", "lookup_order", {"order_id": "A-7"}, "Order A-7 ships today."),
        ("Refund its 5.00 fee.", "refund", {"order_id": "A-7", "amount": 5.0}, "Refunded 5.00."),
    ]
    for user, tool, arguments, answer in turns:
        t = Trace(service="shop")
        turn = t.agent("support", user=user, answer=answer, conversation_id="conv-9")
        t.llm(user=user, answer="", parent=turn, **{"gen_ai.tool.definitions": OFFERED})
        t.tool(tool, arguments, answer, parent=turn)
        t.llm(user=user, answer=answer, parent=turn)
        spans.extend(t.spans)
    return spans


def tick_conversation(loop: Loop, store: SpanStore, clock: Clock, rule: Rule) -> list[Any]:
    store.write_spans(conversation_spans(), now=clock())
    clock.advance(120)
    loop.monitor(store, [rule], idle_seconds=10).tick()
    return list(store.results())


def test_goal_accuracy_sees_each_turns_tool_calls(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    with ScriptedJudgeServer() as server:
        server.add_rule({"score": 1.0, "reason": "goal met"}, schema="GoalScore")
        server.add_rule({"score": 0.5, "reason": "plan so-so"}, schema="PlanScore")
        server.add_rule({"text": "Goals met; the plans were uneven."})  # the free-text reason
        metric = GoalAccuracyMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        [result] = tick_conversation(loop, store, clock, Rule(metric, target="conversation"))
        goal_prompts = [r.prompt for r in server.requests if r.schema_name == "GoalScore"]
    assert len(goal_prompts) == 2  # one per user request
    assert any("lookup_order" in p and "A-7" in p for p in goal_prompts)
    assert any("refund" in p and "5.0" in p for p in goal_prompts)
    assert (result.target_type, result.score) == ("conversation", 0.75)  # (1.0 + 0.5) / 2


def test_tool_use_gets_the_offered_tools_from_the_turns(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    with ScriptedJudgeServer() as server:
        server.add_rule({"score": 1.0, "reason": "right tool"}, schema="ToolSelectionScore")
        server.add_rule({"score": 0.5, "reason": "odd amount"}, schema="ArgumentCorrectnessScore")
        server.add_rule({"reason": "fine"}, schema="Reason")
        server.add_rule({"text": "fine"})
        metric = ToolUseMetric(available_tools=[], model=as_deepeval_model(server.judge()))
        [result] = tick_conversation(loop, store, clock, Rule(metric, target="conversation"))
        selection = [r.prompt for r in server.requests if r.schema_name == "ToolSelectionScore"]
    assert selection and all("lookup_order" in p and "refund" in p for p in selection)
    assert "Find an order by id." in selection[0]  # the definitions' descriptions came along
    # deepeval keeps the lower of the mean selection (1.0) and mean argument (0.5) scores
    assert (result.status, result.score) == ("scored", 0.5)


def test_the_judge_cache_keys_trace_metrics_by_what_the_agent_did() -> None:
    """Two turns with the same request and answer but different steps never share a cached
    result of a metric that is shown the steps; a metric shown only the text still does."""
    two = agent_case(turn_spans("strands", TWO_TOOLS))
    one = two.model_copy(deep=True)
    one.trajectory.steps = one.trajectory.steps[:1]
    with ScriptedJudgeServer() as server:
        model = as_deepeval_model(server.judge())
        trace_metric = DeepEvalMetric(TaskCompletionMetric(model=model))
        tools_metric = DeepEvalMetric(ToolCorrectnessMetric(model=model))
        text_metric = DeepEvalMetric(AnswerRelevancyMetric(model=model))
    assert trace_metric.reads_trajectory and trace_metric.clone().reads_trajectory
    assert tools_metric.reads_trajectory  # the offered tools come from the trajectory
    assert cache_key(trace_metric, one) != cache_key(trace_metric, two)
    assert cache_key(tools_metric, one) != cache_key(tools_metric, two)
    assert text_metric.reads_trajectory is False
    assert cache_key(text_metric, one) == cache_key(text_metric, two)
