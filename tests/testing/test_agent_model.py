"""The scripted agent model (spanjudge.testing.agent_model): tool calls per turn, the final answer
once the tool results are in the messages, agents told apart by their instructions, streaming,
and the process form other virtual environments start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from spanjudge.testing import (
    AgentConversation,
    AgentModelServer,
    AgentReply,
    AgentScript,
    ScriptedToolCall,
)

QUESTION = "Where is my order A-1004?"
LOOKUP = ScriptedToolCall("lookup_order", {"order_id": "A-1004"})
SCRIPT = AgentScript(
    [
        AgentConversation(
            QUESTION,
            [
                AgentReply(tool_calls=[LOOKUP]),
                AgentReply(tool_calls=[LOOKUP]),
                AgentReply(content="Order A-1004 is in transit."),
            ],
            name="t4",
        ),
        AgentConversation(
            "Refund my double charge.",
            [AgentReply(tool_calls=[ScriptedToolCall("transfer_to_billing_agent")])],
            system="You are the support agent",
            name="s",
        ),
        AgentConversation(
            "Refund my double charge.",
            [
                AgentReply(tool_calls=[ScriptedToolCall("refund", {"amount": 30.0})]),
                AgentReply(content="Refunded 30.00."),
            ],
            system="You are the billing agent",
            name="b",
        ),
    ]
)


def _user(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are the support agent."},
        {"role": "user", "content": text},
    ]


def _answered(messages: list[dict[str, Any]], message: Any, result: str) -> list[dict[str, Any]]:
    """``messages`` with the assistant's tool calls and one result per call appended."""
    calls = [c.model_dump() for c in message.tool_calls]
    out = [*messages, {"role": "assistant", "content": None, "tool_calls": calls}]
    return out + [{"role": "tool", "tool_call_id": c["id"], "content": result} for c in calls]


@pytest.fixture
def client() -> Any:
    with AgentModelServer(SCRIPT) as server:
        yield OpenAI(base_url=server.base_url, api_key="x", max_retries=0), server


def test_each_call_gets_the_next_scripted_tool_call_then_the_final_text(client: Any) -> None:
    openai, server = client
    messages = _user(QUESTION)
    seen = []
    for _ in range(3):
        reply = openai.chat.completions.create(model="m", messages=messages).choices[0]
        if reply.finish_reason != "tool_calls":
            break
        seen.append(
            [(c.function.name, json.loads(c.function.arguments)) for c in reply.message.tool_calls]
        )
        messages = _answered(messages, reply.message, "Order A-1004: in transit.")
    assert seen == [[("lookup_order", {"order_id": "A-1004"})]] * 2
    assert reply.finish_reason == "stop"
    assert reply.message.content == "Order A-1004 is in transit."
    assert len(server.requests) == 3


def test_the_reply_depends_on_the_messages_so_a_retried_call_gets_the_same_answer(
    client: Any,
) -> None:
    openai, _ = client
    first = openai.chat.completions.create(model="m", messages=_user(QUESTION)).choices[0]
    again = openai.chat.completions.create(model="m", messages=_user(QUESTION)).choices[0]
    assert first.message.tool_calls[0].id == again.message.tool_calls[0].id == "call_t4_0_0"
    # the final text is repeated once every scripted call is answered
    messages = _user(QUESTION)
    for step in range(2):
        reply = openai.chat.completions.create(model="m", messages=messages).choices[0]
        assert reply.message.tool_calls[0].id == f"call_t4_{step}_0"
        messages = _answered(messages, reply.message, "in transit")
    for _ in range(2):
        last = openai.chat.completions.create(model="m", messages=messages).choices[0]
        assert last.message.content == "Order A-1004 is in transit."


def test_two_agents_of_one_turn_are_told_apart_by_their_instructions(client: Any) -> None:
    openai, _ = client
    support = _user("Refund my double charge.")
    handoff = openai.chat.completions.create(model="m", messages=support).choices[0].message
    assert handoff.tool_calls[0].function.name == "transfer_to_billing_agent"
    # the billing agent sees the support agent's hand-off in its history: not its own step
    history = _answered(support, handoff, "{'assistant': 'billing-agent'}")[1:]
    billing = [{"role": "system", "content": "You are the billing agent."}, *history]
    refund = openai.chat.completions.create(model="m", messages=billing).choices[0].message
    assert refund.tool_calls[0].function.name == "refund"
    assert json.loads(refund.tool_calls[0].function.arguments) == {"amount": 30.0}
    done = _answered(billing, refund, "Refunded 30.00 on order A-1002.")
    final = openai.chat.completions.create(model="m", messages=done).choices[0].message
    assert final.content == "Refunded 30.00."


def test_tool_results_sent_as_user_messages_do_not_hide_the_task(client: Any) -> None:
    # frameworks such as smolagents and CrewAI send observations as user messages
    openai, _ = client
    messages = _user(QUESTION)
    reply = openai.chat.completions.create(model="m", messages=messages).choices[0].message
    messages = _answered(messages, reply, "in transit")
    messages.append({"role": "user", "content": "Observation: in transit"})
    again = openai.chat.completions.create(model="m", messages=messages).choices[0].message
    assert again.tool_calls[0].id == "call_t4_1_0"


def test_streaming_requests_get_the_same_reply_as_deltas_with_usage(client: Any) -> None:
    openai, _ = client
    stream = openai.chat.completions.create(
        model="m", messages=_user(QUESTION), stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    calls = [
        c for chunk in chunks for choice in chunk.choices for c in choice.delta.tool_calls or []
    ]
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("call_t4_0_0", "lookup_order", {"order_id": "A-1004"})
    ]
    finishes = [choice.finish_reason for chunk in chunks for choice in chunk.choices]
    assert finishes[-1] == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_a_request_no_conversation_names_is_refused_naming_its_text(client: Any) -> None:
    _, server = client
    response = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "What is the weather?"}]},
    )
    assert response.status_code == 400
    assert "What is the weather?" in response.json()["error"]["message"]


def test_the_script_reads_from_its_json_form(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "model": "gpt-x",
                "conversations": [
                    {
                        "user": "Hi",
                        "system": "billing",
                        "name": "t1",
                        "replies": [
                            {"tool_calls": [{"name": "refund", "arguments": {"amount": 1}}]},
                            {"content": "Done."},
                        ],
                    }
                ],
            }
        )
    )
    script = AgentScript.load(path)
    assert script.model == "gpt-x"
    [conversation] = script.conversations
    assert (conversation.user, conversation.system, conversation.name) == ("Hi", "billing", "t1")
    assert conversation.replies == [
        AgentReply((ScriptedToolCall("refund", {"amount": 1}),)),
        AgentReply(content="Done."),
    ]
    with pytest.raises(ValueError, match=r"\('Hi'\) has no replies"):
        AgentScript.from_dict({"conversations": [{"user": "Hi", "replies": []}]})


def test_the_module_runs_as_a_process_printing_its_base_url(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps({"conversations": [{"user": "Hi", "replies": [{"content": "Hello."}]}]})
    )
    log = tmp_path / "calls.jsonl"
    command = [sys.executable, "-m", "spanjudge.testing.agent_model", "--script", str(script)]
    process = subprocess.Popen(
        [*command, "--port", "0", "--log", str(log)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        openai = OpenAI(base_url=base_url, api_key="x", max_retries=0)
        reply = openai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}]
        )
        assert reply.choices[0].message.content == "Hello."
    finally:
        process.terminate()
        process.wait(10)
    [logged] = [json.loads(line) for line in log.read_text().splitlines()]
    assert logged["messages"] == [{"role": "user", "content": "Hi"}]
