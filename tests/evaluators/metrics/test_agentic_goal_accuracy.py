"""GoalAccuracyMetric (issue 28 item 2): one judge call per unit interaction (deepeval: two, and
one more for the reason); score = (mean goal score + mean plan score) / 2; each assistant
turn's trajectory is shown; the reason names turns and steps."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.errors import MetricError
from spanjudge.evaluators._judge.metrics.goal_accuracy import GoalAccuracyMetric
from spanjudge.evaluators._judge.test_case import (
    ConversationalTestCase,
    LLMTestCase,
    ToolCall,
    Turn,
)
from tests.evaluators.metrics.agentic_support import support_trajectory
from tests.evaluators.metrics.conftest import prompts_for, schema_names

SCHEMA = "GoalAccuracyVerdict"


def verdict(goal: float, plan: float, steps: list[int] | None = None, name: str = "g") -> Any:
    return {
        "goal": name,
        "goal_score": goal,
        "goal_reason": f"goal {name}",
        "plan_score": plan,
        "plan_reason": f"plan {name}",
        "steps": steps or [],
    }


def convo() -> ConversationalTestCase:
    return ConversationalTestCase(
        turns=[
            Turn(role="user", content="Cancel order 7 and email me."),
            Turn(role="assistant", content="Done, email sent.", trajectory=support_trajectory()),
            Turn(role="user", content="What is the weather in Paris?"),
            Turn(
                role="assistant",
                content="Sunny.",
                tools_called=[ToolCall(name="weather", input_parameters={"city": "Paris"})],
            ),
        ]
    )


def test_score_averages_goal_and_plan_means_one_call_per_exchange(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule(verdict(0.5, 1.0, [3], "cancel"), schema=SCHEMA, contains="Cancel order")
    judge_server.add_rule(verdict(1.0, 0.5, [], "weather"), schema=SCHEMA, contains="Paris")
    metric = GoalAccuracyMetric(model=scripted_judge)
    # goals (0.5 + 1) / 2 = 0.75, plans (1 + 0.5) / 2 = 0.75
    assert metric.measure(convo()) == pytest.approx(0.75)
    assert schema_names(judge_server) == [SCHEMA, SCHEMA] and metric.judge_calls == 2
    assert [v["turn"] for v in metric.to_data().verdicts] == [0, 2]


def test_reason_names_the_turns_and_steps_that_lost_points(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule(verdict(0.0, 0.5, [3], "cancel"), schema=SCHEMA, contains="Cancel order")
    judge_server.add_rule(verdict(1.0, 1.0, [], "weather"), schema=SCHEMA, contains="Paris")
    metric = GoalAccuracyMetric(model=scripted_judge)
    metric.measure(convo())
    reason = metric.reason or ""
    assert reason.startswith("The score is 0.62: goal 0.50 and plan 0.75, averaged over 2")
    assert "Turn 0 (cancel): goal 0.00, goal cancel; plan 0.50, plan cancel" in reason
    assert "turn 1 step 3 (tool_call send_email)" in reason
    assert "Turn 2" not in reason  # a perfect exchange is not described


def test_each_assistant_turns_trajectory_or_tools_is_in_the_prompt(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule(verdict(1.0, 1.0), schema=SCHEMA)
    GoalAccuracyMetric(model=scripted_judge).measure(convo())
    first, second = sorted(prompts_for(judge_server, SCHEMA), key=lambda p: "Paris" in p)
    assert "User (turn 0): Cancel order 7" in first
    assert "[step 3] tool_call send_email" in first and "ERROR: SMTPError" in first
    assert "Assistant (turn 3): Sunny." in second
    assert '[step 0] tool_call weather\n    arguments: {"city": "Paris"}' in second


def test_a_conversation_without_an_answered_user_turn_is_missing_turns(
    scripted_judge: Any,
) -> None:
    metric = GoalAccuracyMetric(model=scripted_judge)
    only_user = ConversationalTestCase(turns=[Turn(role="user", content="hello?")])
    assert metric.missing_fields(only_user) == ["turns"]
    assert metric.missing_fields(LLMTestCase(input="a", actual_output="b")) == ["turns"]


def test_include_reason_off_and_bad_json(judge_server: Any, scripted_judge: Any) -> None:
    from spanjudge.testing import Fault

    judge_server.add_rule(verdict(1.0, 1.0), schema=SCHEMA, times=2)
    metric = GoalAccuracyMetric(model=scripted_judge, include_reason=False)
    assert metric.measure(convo()) == 1.0 and metric.reason is None
    judge_server.add_rule(Fault.malformed("x"), schema=SCHEMA)
    with pytest.raises(MetricError):
        GoalAccuracyMetric(model=scripted_judge).measure(convo())


def test_goal_accuracy_is_conversational_and_runs_on_conversations_only() -> None:
    assert GoalAccuracyMetric.conversational is True
    assert GoalAccuracyMetric.targets == ("conversation",)
