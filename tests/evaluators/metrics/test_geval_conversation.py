"""ConversationalGEval: criteria over a whole conversation, turns shown with the chosen fields."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge.errors import MissingFieldError, ParamError
from spanjudge.evaluators._judge.metrics.geval import ConversationalGEval, GEval
from spanjudge.evaluators._judge.metrics.geval_steps import steps_cache
from spanjudge.evaluators._judge.test_case import (
    ConversationalTestCase,
    LLMTestCase,
    ToolCall,
    Turn,
)
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.metrics.conftest import prompts_for, schema_names

CONVO = ConversationalTestCase(
    scenario="A customer chases a late parcel.",
    turns=[
        Turn(role="user", content="My parcel is late."),
        Turn(
            role="assistant",
            content="It left the depot today.",
            retrieval_context=["Parcel 42: left depot on Monday."],
            tools_called=[ToolCall(name="track", input_parameters={"id": "42"})],
        ),
        Turn(role="user", content="Thanks!"),
    ],
)


@pytest.fixture(autouse=True)
def _own_steps_cache(tmp_path: Path) -> Iterator[None]:
    steps_cache.directory = tmp_path / "cache"
    steps_cache.clear()
    yield
    steps_cache.directory = None
    steps_cache.clear()


def patience(judge: Any, **kwargs: Any) -> ConversationalGEval:
    return ConversationalGEval(
        name="patience", criteria="The assistant stays patient.", model=judge, **kwargs
    )


def script(server: ScriptedJudgeServer, score: int, **kwargs: Any) -> None:
    server.add_rule({"steps": ["Find repeated requests.", "Check the tone."]}, schema="GEvalSteps")
    server.add_rule({"reason": "Calm throughout.", "score": score}, schema="GEvalScore", **kwargs)


def turns_in(prompt: str) -> list[dict[str, Any]]:
    start = prompt.index("Turns:\n") + len("Turns:\n")
    value, _ = json.JSONDecoder().raw_decode(prompt[start:])
    assert isinstance(value, list)
    return value


def test_role_and_content_by_default(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 9, logprobs={"9": {"9": math.log(0.6), "10": math.log(0.4)}})
    metric = patience(scripted_judge, threshold=0.94)
    # 0.6 * 9 + 0.4 * 10 = 5.4 + 4 = 9.4 -> 0.94, exactly the threshold: passes
    assert metric.measure(CONVO) == 0.94
    assert metric.success is True
    assert metric.evaluation_params == ("role", "content")
    prompt = prompts_for(judge_server, "GEvalScore")[0]
    assert turns_in(prompt) == [
        {"role": "user", "content": "My parcel is late."},
        {"role": "assistant", "content": "It left the depot today."},
        {"role": "user", "content": "Thanks!"},
    ]
    assert "Scenario:" not in prompt
    assert "Role and Content" in prompts_for(judge_server, "GEvalSteps")[0]


def test_turn_fields_shown_where_present_and_conversation_fields_on_top(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 6)
    metric = patience(
        scripted_judge, evaluation_params=["tools_called", "retrieval_context", "scenario"]
    )
    assert metric.evaluation_params == (
        "role",
        "content",
        "tools_called",
        "retrieval_context",
        "scenario",
    )
    assert metric.measure(CONVO) == 0.6
    prompt = prompts_for(judge_server, "GEvalScore")[0]
    assert "Scenario:\nA customer chases a late parcel." in prompt
    shown = turns_in(prompt)
    assert shown[0] == {"role": "user", "content": "My parcel is late."}
    assert shown[1]["retrieval_context"] == ["Parcel 42: left depot on Monday."]
    assert shown[1]["tools_called"] == [{"name": "track", "input_parameters": {"id": "42"}}]


def test_a_chosen_conversation_field_that_is_missing_skips_the_case(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    metric = patience(scripted_judge, evaluation_params=["content", "chatbot_role"])
    with pytest.raises(MissingFieldError) as info:
        metric.measure(CONVO)
    assert info.value.fields == ["chatbot_role"]
    # a single-turn case is not a conversation
    with pytest.raises(MissingFieldError):
        metric.measure(LLMTestCase(input="a", actual_output="b"))
    assert judge_server.requests == []


def test_strict_mode_is_binary_over_conversations(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 1)
    metric = patience(scripted_judge, strict_mode=True)
    assert metric.measure(CONVO) == 1.0
    assert (
        "1 if the conversation meets every step completely"
        in (prompts_for(judge_server, "GEvalScore")[0])
    )
    assert schema_names(judge_server).count("GEvalSteps") == 1


def test_params_accept_deepeval_multi_turn_names_and_refuse_single_turn_ones() -> None:
    from deepeval.test_case import MultiTurnParams

    metric = ConversationalGEval(
        name="x",
        criteria="c",
        evaluation_params=[MultiTurnParams.SCENARIO, MultiTurnParams.ROLE],
        model="openai/not-called",
    )
    assert metric.evaluation_params == ("role", "content", "scenario")
    with pytest.raises(ParamError, match=r"unknown field 'actual_output'.*allowed: role, content"):
        ConversationalGEval(
            name="x", criteria="c", evaluation_params=["actual_output"], model="openai/x"
        )


def test_rules_take_it_on_conversations_only() -> None:
    metric = patience("openai/not-called")
    rule = Rule(metric, target="conversation")
    assert rule.name == "patience-conversation"
    with pytest.raises(ValueError, match="needs target='conversation'"):
        Rule(metric, target="agent")
    assert GEval(name="x", criteria="c", model="openai/x").conversational is False
    clone = metric.clone()
    assert isinstance(clone, ConversationalGEval) and clone._config() == metric._config()
