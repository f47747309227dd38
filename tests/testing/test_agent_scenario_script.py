"""The agent scenario's script (tests/interop/record/agent_scenario.py) played by the scripted
agent model through a minimal tool loop gives, turn by turn, the scenario's expected trajectory:
the recorders' frameworks run the same loop, so a wrong script shows here first."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from spanjudge.testing import AgentModelServer, AgentScript

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop" / "record"))
import agent_scenario as sc

PROMPTS = {sc.SUPPORT_AGENT: sc.SUPPORT_PROMPT, sc.BILLING_AGENT: sc.BILLING_PROMPT}


def _play(openai: OpenAI, turn: sc.Turn) -> list[sc.Step]:
    """Run one turn as a framework would: call the model, run the tools it asks for, hand over
    to the billing agent on ``transfer_to_billing_agent`` (keeping the history)."""
    agent, history = sc.SUPPORT_AGENT, [{"role": "user", "content": turn.question}]
    steps: list[sc.Step] = []
    for _ in range(10):
        messages = [{"role": "system", "content": PROMPTS[agent]}, *history]
        message = openai.chat.completions.create(model=sc.MODEL, messages=messages)
        reply = message.choices[0].message
        calls = [
            sc.ToolCall(c.function.name, json.loads(c.function.arguments))
            for c in reply.tool_calls or []
        ]
        steps.append(sc.ModelCall(agent, tuple(calls), reply.content if not calls else None))
        if not calls:
            return steps
        history.append(
            {"role": "assistant", "tool_calls": [c.model_dump() for c in reply.tool_calls or []]}
        )
        for call, raw in zip(calls, reply.tool_calls or [], strict=True):
            if call.name == sc.HANDOFF_TOOL:
                steps.append(sc.HandOff(agent, sc.BILLING_AGENT))
                agent, content = sc.BILLING_AGENT, json.dumps({"assistant": sc.BILLING_AGENT})
            else:
                try:
                    content = sc.TOOLS[call.name](**call.arguments)
                    steps.append(sc.ToolExecution(agent, call.name, call.arguments, content))
                except sc.ToolError as exc:
                    content = f"Error: {exc}"
                    steps.append(sc.ToolExecution(agent, call.name, call.arguments, error=str(exc)))
            history.append({"role": "tool", "tool_call_id": raw.id, "content": content})
    raise AssertionError("the agent did not finish in 10 model calls")


@pytest.fixture(scope="module")
def openai() -> Any:
    with AgentModelServer(AgentScript.from_dict(sc.script())) as server:
        yield OpenAI(base_url=server.base_url, api_key="x", max_retries=0)


@pytest.mark.parametrize("turn", sc.TURNS, ids=lambda t: t.kind)
def test_each_turn_plays_out_as_its_expected_trajectory(openai: OpenAI, turn: sc.Turn) -> None:
    expected = turn.expected()
    steps = _play(openai, turn)
    assert steps == list(expected.steps)
    assert steps[-1] == sc.ModelCall(expected.final_agent, text=expected.final_output)


def test_the_planted_behaviours_are_where_the_scenario_says() -> None:
    kinds = {t.kind: t.expected() for t in sc.TURNS}
    [error] = [s for s in kinds["tool-error"].tool_executions if s.error]
    assert (error.name, error.result) == ("refund", None)
    loop = [(s.name, s.arguments) for s in kinds["loop"].tool_executions]
    assert loop == [("lookup_order", {"order_id": "A-1004"})] * 3
    assert [s for s in kinds["hand-off"].steps if isinstance(s, sc.HandOff)] == [
        sc.HandOff(sc.SUPPORT_AGENT, sc.BILLING_AGENT)
    ]
    assert kinds["hand-off"].final_agent == sc.BILLING_AGENT
    assert all(s.name != "refund" for s in kinds["unfinished"].tool_executions)
