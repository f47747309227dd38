"""Parity (issue 28): our agentic metrics against deepeval 4.3.1's own implementations, through
the bridge, on the same cases (recorded agent turns of several frameworks, a conversation) with
the same judgement scripted for each side: the scores are the same.

The two sides ask differently (deepeval extracts the task, then scores; ours asks once), so each
side gets its own scripted server answering its own schemas with the same judgement: "0.75
achieved", "the second call's arguments are wrong", "goal met, plan half sound". Where deepeval
needs no judge (a plan-less trace, expected tools) the scores match with no scripting at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from deepeval import metrics as de
from deepeval.test_case import ToolCall as DeepEvalToolCall

import spanjudge as ours
from spanjudge.evaluators._judge.deepeval_bridge.metric import DeepEvalMetric
from spanjudge.evaluators._judge.deepeval_bridge.model import as_deepeval_model
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, ToolCall
from spanjudge.evaluators._rebuild.cases import default_case
from spanjudge.evaluators._rebuild.targets import conversation_target
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.deepeval.agent_support import (
    LOOP,
    TOOL_ERROR,
    TWO_TOOLS,
    UNFINISHED,
    agent_case,
    turn_spans,
)
from tests.evaluators.deepeval.test_agent_bridge_tools import conversation_spans
from tests.evaluators.online.spans import Trace

Script = Callable[[ScriptedJudgeServer], None]


@contextmanager
def judged(script: Script) -> Iterator[tuple[ScriptedJudgeServer, Any]]:
    with ScriptedJudgeServer() as server:
        script(server)
        yield server, server.judge()


def both(
    make_ours: Callable[[Any], Any],
    make_theirs: Callable[[Any], Any],
    case: Any,
    ours_script: Script,
    theirs_script: Script,
) -> tuple[Any, Any, int, int]:
    """Measure ``case`` with our metric and with deepeval's (bridged), each judged by its own
    scripted server; return both metrics and the judge calls each made."""
    with judged(ours_script) as (server, judge):
        mine = make_ours(judge)
        mine.measure(case)
        our_calls = len(server.requests)
    with judged(theirs_script) as (server, judge):
        theirs = DeepEvalMetric(make_theirs(as_deepeval_model(judge)))
        theirs.measure(case)
        their_calls = len(server.requests)
    return mine, theirs, our_calls, their_calls


def nothing(server: ScriptedJudgeServer) -> None:
    """No rule: any judge call fails the test (the server answers 500 to the unscripted)."""


# ============================================================ Task Completion
@pytest.mark.parametrize("framework", ["openai-agents", "strands", "pydantic-ai"])
@pytest.mark.parametrize(
    ("turn", "verdict", "strict"),
    [(TWO_TOOLS, 1.0, False), (TOOL_ERROR, 0.25, False), (UNFINISHED, 0.5, False),
     (UNFINISHED, 0.5, True)],
)  # fmt: skip
def test_task_completion(framework: str, turn: int, verdict: float, strict: bool) -> None:
    case = agent_case(turn_spans(framework, turn))

    def mine(server: ScriptedJudgeServer) -> None:
        server.add_rule(
            {"task": "t", "outcome": "o", "verdict": verdict, "reason": "r", "steps": []},
            schema="TaskCompletionVerdict",
        )

    def theirs(server: ScriptedJudgeServer) -> None:
        server.add_rule({"task": "t", "outcome": "o"}, schema="TaskAndOutcome")
        server.add_rule({"verdict": verdict, "reason": "r"}, schema="TaskCompletionVerdict")

    a, b, our_calls, their_calls = both(
        lambda j: ours.TaskCompletionMetric(model=j, strict_mode=strict),
        lambda m: de.TaskCompletionMetric(model=m, strict_mode=strict),
        case, mine, theirs,
    )  # fmt: skip
    expected = (1.0 if verdict == 1.0 else 0.0) if strict else verdict
    assert a.score == b.score == expected
    assert a.success == b.success
    assert (our_calls, their_calls) == (1, 2)


# ============================================================ Step Efficiency
@pytest.mark.parametrize("framework", ["openai-agents", "strands", "crewai"])
def test_step_efficiency(framework: str) -> None:
    case = agent_case(turn_spans(framework, LOOP))
    a, b, our_calls, their_calls = both(
        lambda j: ours.StepEfficiencyMetric(model=j),
        lambda m: de.StepEfficiencyMetric(model=m),
        case,
        lambda s: s.add_rule(
            {"task": "t", "score": 0.4, "reason": "r"}, schema="StepEfficiencyVerdict"
        ),
        lambda s: (
            s.add_rule({"task": "t"}, schema="Task"),
            s.add_rule({"score": 0.4, "reason": "r"}, schema="EfficiencyVerdict"),
        ),
    )
    assert a.score == b.score == 0.4
    assert (our_calls, their_calls) == (1, 2)


# ============================================================ Plan Adherence / Quality
PLAN_METRICS = [
    (ours.PlanAdherenceMetric, de.PlanAdherenceMetric, "PlanAdherence"),
    (ours.PlanQualityMetric, de.PlanQualityMetric, "PlanQuality"),
]


@pytest.mark.parametrize(("mine", "theirs", "_"), PLAN_METRICS)
def test_plan_metrics_without_a_plan(mine: Any, theirs: Any, _: str) -> None:
    """deepeval's documentation: no plan in the trace scores 1. Its judge is asked whether
    there is one (scripted: none); ours reads the trajectory's plan steps and asks nobody."""
    case = agent_case(turn_spans("openai-agents", TWO_TOOLS))
    a, b, our_calls, their_calls = both(
        lambda j: mine(model=j),
        lambda m: theirs(model=m),
        case,
        nothing,
        lambda s: (
            s.add_rule({"task": "t"}, schema="Task"),
            s.add_rule({"plan": []}, schema="AgentPlan"),
        ),
    )
    assert a.score == b.score == 1.0
    assert (our_calls, their_calls) == (0, 2)


def planned_case() -> LLMTestCase:
    t = Trace()
    turn = t.agent("support", user="Refund order 7's fee", answer="Refunded.")
    t.span(
        "plan",
        turn,
        {
            attrs.GEN_AI_OPERATION_NAME: "plan",
            attrs.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": "1. look up 2. refund"}],
                    }
                ]
            ),
        },
    )
    t.llm(parent=turn)
    t.tool("lookup_order", {"id": 7}, {"fee": 5}, parent=turn)
    t.tool("refund", {"id": 7, "amount": 5}, "ok", parent=turn)
    t.llm(parent=turn, answer="Refunded.")
    return agent_case(t.spans)


@pytest.mark.parametrize(("mine", "theirs", "name"), PLAN_METRICS)
def test_plan_metrics_with_a_plan(mine: Any, theirs: Any, name: str) -> None:
    case = planned_case()
    a, b, our_calls, their_calls = both(
        lambda j: mine(model=j),
        lambda m: theirs(model=m),
        case,
        lambda s: s.add_rule({"score": 0.8, "reason": "r"}, schema=f"{name}Verdict"),
        lambda s: (
            s.add_rule({"task": "t"}, schema="Task"),
            s.add_rule({"plan": ["look up", "refund"]}, schema="AgentPlan"),
            s.add_rule({"score": 0.8, "reason": "r"}, schema=f"{name}Score"),
        ),
    )
    assert a.score == b.score == 0.8
    assert (our_calls, their_calls) == (1, 3)


# ============================================================ Argument Correctness
@pytest.mark.parametrize("framework", ["openai-agents", "strands", "pydantic-ai", "crewai"])
def test_argument_correctness(framework: str) -> None:
    """Two tool calls, the second's arguments judged wrong: 1 of 2 correct on both sides."""
    case = agent_case(turn_spans(framework, TWO_TOOLS))
    verdicts = [{"verdict": "yes"}, {"verdict": "no", "reason": "wrong amount"}]
    a, b, our_calls, their_calls = both(
        lambda j: ours.ArgumentCorrectnessMetric(model=j),
        lambda m: de.ArgumentCorrectnessMetric(model=m),
        case,
        lambda s: s.add_rule({"verdicts": verdicts, "reason": "r"}, schema="ArgumentVerdicts"),
        lambda s: (
            s.add_rule({"verdicts": verdicts}, schema="Verdicts"),
            s.add_rule({"reason": "r"}, schema="ArgumentCorrectnessScoreReason"),
        ),
    )
    assert a.score == b.score == 0.5
    assert (our_calls, their_calls) == (1, 2)


# ============================================================ Tool Correctness
CALLED = [ToolCall(name="lookup_order", input_parameters={"id": 7}), ToolCall(name="refund")]


@pytest.mark.parametrize(
    ("expected", "options", "score"),
    [
        (["lookup_order", "refund"], {}, 1.0),
        (["lookup_order", "cancel_order"], {}, 0.5),
        (["refund", "lookup_order"], {"should_consider_ordering": True}, 0.5),
        (["lookup_order", "refund"], {"should_exact_match": True}, 1.0),
        (["lookup_order"], {"should_exact_match": True}, 0.0),
    ],
)
def test_tool_correctness_with_expected_tools_needs_no_judge(
    expected: list[str], options: dict[str, Any], score: float
) -> None:
    case = LLMTestCase(
        input="Refund order 7's fee",
        actual_output="Refunded.",
        tools_called=CALLED,
        expected_tools=[ToolCall(name=n) for n in expected],
    )
    a, b, our_calls, their_calls = both(
        lambda j: ours.ToolCorrectnessMetric(model=j, **options),
        lambda m: de.ToolCorrectnessMetric(model=m, **options),
        case, nothing, nothing,
    )  # fmt: skip
    assert a.score == b.score == score
    assert (our_calls, their_calls) == (0, 0)


def test_tool_correctness_with_available_tools_takes_the_lower_score() -> None:
    """Both sides judge the selection among the available tools (deepeval one 0-1 score, ours a
    verdict per call: 1 of 2 right) and keep the lower of that and the expected-tools score."""
    case = agent_case(turn_spans("strands", TWO_TOOLS)).model_copy(
        update={"expected_tools": [ToolCall(name="lookup_order"), ToolCall(name="refund")]}
    )
    offered = ["lookup_order", "refund", "handoff_to_agent"]
    verdicts = [{"verdict": "yes"}, {"verdict": "no", "reason": "not needed"}]
    a, b, our_calls, their_calls = both(
        lambda j: ours.ToolCorrectnessMetric(
            available_tools=[ToolCall(name=n) for n in offered], model=j
        ),
        lambda m: de.ToolCorrectnessMetric(
            available_tools=[DeepEvalToolCall(name=n) for n in offered], model=m
        ),
        case,
        lambda s: s.add_rule({"verdicts": verdicts, "reason": "r"}, schema="ToolSelectionVerdicts"),
        lambda s: s.add_rule({"score": 0.5, "reason": "r"}, schema="ToolSelectionScore"),
    )
    assert a.score == b.score == 0.5
    assert (our_calls, their_calls) == (1, 1)


# ============================================================ Goal Accuracy
def conversation_case() -> ConversationalTestCase:
    spans = conversation_spans()
    target = conversation_target("conv-9", spans)
    assert target is not None
    case = default_case(target, spans)
    assert isinstance(case, ConversationalTestCase)
    return case


def test_goal_accuracy() -> None:
    """Two exchanges: goal met / plan half sound, then goal half met / plan sound. deepeval
    averages the goal scores and the plan scores and takes the mean of both: 0.75."""
    first, second = "Where is order A-7?", "Refund its 5.00 fee."

    def mine(s: ScriptedJudgeServer) -> None:
        for text, goal, plan in ((first, 1.0, 0.5), (second, 0.5, 1.0)):
            s.add_rule(
                {"goal_score": goal, "plan_score": plan, "goal_reason": "g", "plan_reason": "p"},
                schema="GoalAccuracyVerdict", contains=text,
            )  # fmt: skip

    def theirs(s: ScriptedJudgeServer) -> None:
        for text, goal, plan in ((first, 1.0, 0.5), (second, 0.5, 1.0)):
            s.add_rule({"score": goal, "reason": "g"}, schema="GoalScore", contains=text)
            s.add_rule({"score": plan, "reason": "p"}, schema="PlanScore", contains=text)
        s.add_rule({"text": "reason"})

    a, b, our_calls, their_calls = both(
        lambda j: ours.GoalAccuracyMetric(model=j),
        lambda m: de.GoalAccuracyMetric(model=m),
        conversation_case(), mine, theirs,
    )  # fmt: skip
    assert a.score == b.score == 0.75
    assert (our_calls, their_calls) == (2, 5)


def test_a_turn_that_called_no_tool() -> None:
    """No tool call: both score 1 with no judge call (deepeval: "No tool calls provided"). Online
    the rebuilt case leaves ``tools_called`` unset when the turn has no tool span, and deepeval
    requires the field: its Argument and Tool Correctness are skipped there, never scored."""
    t = Trace()
    turn = t.agent("support", user="Hi", answer="Hello!")
    t.llm(parent=turn, user="Hi", answer="Hello!")
    rebuilt = agent_case(t.spans)
    assert rebuilt.tools_called is None
    case = rebuilt.model_copy(update={"tools_called": []})  # deepeval measures an empty list
    a, b, our_calls, their_calls = both(
        lambda j: ours.ArgumentCorrectnessMetric(model=j),
        lambda m: de.ArgumentCorrectnessMetric(model=m),
        case,
        nothing,
        nothing,
    )
    assert a.score == b.score == 1.0
    assert (our_calls, their_calls) == (0, 0)
    assert b.missing_fields(rebuilt) == ["tools_called"]
    assert a.missing_fields(rebuilt) == []
