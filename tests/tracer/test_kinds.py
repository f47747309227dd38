"""What each kind records: names, GenAI attributes, messages in the semconv shape."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from spanjudge import conversation, current_span, observe
from tests.tracer.conftest import Spans


def _json(span: Any, key: str) -> Any:
    return json.loads(span.attributes[key])


def test_agent_records_name_conversation_and_messages(spans: Spans) -> None:
    @observe(kind="agent", name="support")
    def agent(question: str, conversation_id: str | None = None) -> str:
        return "Refunds take 5 days."

    agent("How long do refunds take?", conversation_id="conv-1")
    span = spans.named("invoke_agent support")
    assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert span.attributes["spanjudge.kind"] == "agent"
    assert span.attributes["gen_ai.agent.name"] == "support"
    assert span.attributes["gen_ai.conversation.id"] == "conv-1"
    assert _json(span, "gen_ai.input.messages") == [
        {"role": "user", "parts": [{"type": "text", "content": "How long do refunds take?"}]}
    ]
    assert _json(span, "gen_ai.output.messages") == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Refunds take 5 days."}],
            "finish_reason": "stop",
        }
    ]


def test_agent_conversation_id_from_named_argument(spans: Spans) -> None:
    @observe(kind="agent", conversation_id_arg="thread")
    def agent(thread: str, text: str) -> str:
        return "ok"

    agent("t-9", "hello")
    span = spans.named("invoke_agent agent")
    assert span.attributes["gen_ai.conversation.id"] == "t-9"
    assert _json(span, "gen_ai.input.messages")[0]["parts"][0]["content"] == "hello"


async def test_conversation_context_reaches_every_span_sync_and_async(spans: Spans) -> None:
    @observe(kind="tool")
    def tool() -> int:
        return 1

    @observe(kind="agent")
    async def agent(q: str) -> str:
        tool()
        return q

    with conversation("c-sync", user_id="u-1"):
        tool()
    async with conversation("c-async"):
        await agent("x")
    tool()  # outside: no conversation id
    tools = [s for s in spans.all() if s.name == "execute_tool tool"]
    assert [s.attributes.get("gen_ai.conversation.id") for s in tools] == [
        "c-sync",
        "c-async",
        None,
    ]
    assert tools[0].attributes["spanjudge.user.id"] == "u-1"
    assert "spanjudge.user.id" not in tools[1].attributes
    assert spans.named("invoke_agent agent").attributes["gen_ai.conversation.id"] == "c-async"


def test_llm_from_openai_style_dict_response(spans: Spans) -> None:
    @observe(kind="llm", model="openai/gpt-4o-mini")
    def chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "call_1", "function": {"name": "lookup", "arguments": "{}"}}
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7},
        }

    chat(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Where is my order?"}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "shipped"},
        ]
    )
    span = spans.named("chat openai/gpt-4o-mini")
    a = span.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "openai/gpt-4o-mini"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
    assert a["gen_ai.response.id"] == "chatcmpl-1"
    assert a["gen_ai.usage.input_tokens"] == 11
    assert a["gen_ai.usage.output_tokens"] == 7
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert _json(span, "gen_ai.input.messages") == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Where is my order?"}]},
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call_0", "response": "shipped"}],
        },
    ]
    assert _json(span, "gen_ai.output.messages") == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": "{}"}],
            "finish_reason": "tool_calls",
        }
    ]


def test_llm_model_from_call_argument_and_object_response(spans: Spans) -> None:
    @observe(kind="llm", provider="acme")
    def complete(prompt: str, model: str = "default") -> Any:
        usage = SimpleNamespace(input_tokens=3, output_tokens=4)  # Anthropic-style names
        message = SimpleNamespace(role="assistant", content="fine", tool_calls=None)
        return SimpleNamespace(
            model=model,
            choices=[SimpleNamespace(message=message, finish_reason="stop")],
            usage=usage,
        )

    complete("hi", model="claude-x")
    span = spans.named("chat claude-x")
    assert span.attributes["gen_ai.provider.name"] == "acme"
    assert span.attributes["gen_ai.usage.input_tokens"] == 3
    assert span.attributes["gen_ai.usage.output_tokens"] == 4
    assert _json(span, "gen_ai.input.messages")[0]["parts"][0]["content"] == "hi"
    assert _json(span, "gen_ai.output.messages")[0]["parts"][0]["content"] == "fine"


def test_llm_without_model_is_named_from_the_response(spans: Spans) -> None:
    @observe(kind="llm")
    def call(prompt: str) -> dict[str, Any]:
        return {"model": "resp-model", "choices": [{"message": {"content": "x"}}]}

    call("p")
    assert spans.named("chat resp-model").attributes["gen_ai.request.model"] == "resp-model"


def test_llm_usage_and_model_set_by_hand_win(spans: Spans) -> None:
    @observe(kind="llm")
    def call(prompt: str) -> dict[str, Any]:
        span = current_span()
        span.set_model("hand-model", provider="local")
        span.set_usage(input_tokens=1, output_tokens=2)
        span.set_metadata(team="a")
        span.set_metadata(run=3)
        span.set_attribute("app.flag", {"nested": True})
        span.set_attributes({"app.n": 5})
        return {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 99}}

    call("p")
    span = spans.named("chat hand-model")
    assert span.attributes["gen_ai.provider.name"] == "local"
    assert span.attributes["gen_ai.usage.input_tokens"] == 1
    assert span.attributes["gen_ai.usage.output_tokens"] == 2
    assert _json(span, "spanjudge.metadata") == {"team": "a", "run": 3}
    assert _json(span, "app.flag") == {"nested": True}
    assert span.attributes["app.n"] == 5


def test_set_output_replaces_the_return_value(spans: Spans) -> None:
    @observe(kind="agent")
    def agent(q: str) -> dict[str, str]:
        current_span().set_output("the real answer")
        return {"internal": "state"}

    agent("q")
    out = _json(spans.named("invoke_agent agent"), "gen_ai.output.messages")
    assert out[0]["parts"][0]["content"] == "the real answer"


def test_handle_is_a_no_op_outside_a_span(spans: Spans) -> None:
    handle = current_span()
    assert not handle
    handle.set_attribute("k", object())
    handle.set_usage(1, 2)
    handle.set_metadata(a=1)
    handle.set_model("m")
    handle.set_output("x")
    assert spans.all() == []


@dataclass
class Doc:
    page_content: str
    metadata: dict[str, Any]


def test_retriever_accepts_strings_dicts_and_document_objects(spans: Spans) -> None:
    @observe(kind="retriever")
    def search(query: str, k: int = 3) -> list[Any]:
        return [
            "plain text",
            {"id": "d2", "score": 0.75, "text": "dict text"},
            Doc("object text", {"id": "d3", "score": 0.5}),
        ]

    search("refund policy")
    span = spans.named("retrieval search")
    assert span.attributes["gen_ai.operation.name"] == "retrieval"
    assert span.attributes["gen_ai.retrieval.query.text"] == "refund policy"
    assert _json(span, "gen_ai.retrieval.documents") == [
        {"id": "0"},
        {"id": "d2", "score": 0.75},
        {"id": "d3", "score": 0.5},
    ]
    assert _json(span, "spanjudge.retrieval.documents.content") == [
        "plain text",
        "dict text",
        "object text",
    ]


def test_tool_records_name_call_id_arguments_and_result(spans: Spans) -> None:
    @observe(kind="tool", name="lookup_order", description="Find an order")
    def lookup(
        order_id: str, *extra: int, verbose: bool = False, tool_call_id: str = ""
    ) -> dict[str, str]:
        return {"status": "shipped"}

    lookup("1042", 7, verbose=True, tool_call_id="call_abc")
    lookup("1043")
    first, second = spans.all()
    assert first.name == "execute_tool lookup_order"
    assert first.attributes["gen_ai.tool.name"] == "lookup_order"
    assert first.attributes["gen_ai.tool.description"] == "Find an order"
    assert first.attributes["gen_ai.tool.call.id"] == "call_abc"
    assert _json(first, "gen_ai.tool.call.arguments") == {
        "order_id": "1042",
        "extra": [7],
        "verbose": True,
        "tool_call_id": "call_abc",
    }
    assert _json(first, "gen_ai.tool.call.result") == {"status": "shipped"}
    generated = second.attributes["gen_ai.tool.call.id"]
    assert generated.startswith("call_") and generated != "call_abc"


def test_chain_records_input_and_output(spans: Spans) -> None:
    @observe(kind="chain", name="pipeline")
    def run(a: int, b: list[int]) -> dict[str, int]:
        return {"sum": a + sum(b)}

    run(1, [2, 3])
    span = spans.named("invoke_workflow pipeline")
    assert _json(span, "spanjudge.input") == {"a": 1, "b": [2, 3]}
    assert _json(span, "spanjudge.output") == {"sum": 6}


async def test_async_llm_stream_of_openai_chunks(spans: Spans) -> None:
    def chunk(text: str | None, usage: dict[str, int] | None = None) -> dict[str, Any]:
        choices = [] if text is None else [{"delta": {"content": text}}]
        return {"model": "m-1", "choices": choices, "usage": usage}

    @observe(kind="llm", model="m")
    async def stream(messages: list[dict[str, str]]) -> Any:
        for part in ("Hel", "lo"):
            await asyncio.sleep(0)
            yield chunk(part)
        yield chunk(None, {"prompt_tokens": 2, "completion_tokens": 2})

    out = [c async for c in stream([{"role": "user", "content": "hi"}])]
    assert len(out) == 3
    span = spans.named("chat m")
    assert _json(span, "gen_ai.output.messages")[0]["parts"][0]["content"] == "Hello"
    assert span.attributes["gen_ai.usage.output_tokens"] == 2


def test_repeated_calls_record_the_same_attributes(spans: Spans) -> None:
    # From the second call on, inputs go to start_span directly: the result must not change.
    @observe(kind="llm", model="m")
    def call(prompt: str) -> dict[str, Any]:
        if prompt == "hand":
            current_span().set_usage(input_tokens=1)
            current_span().set_output("by hand")
        return {
            "choices": [{"message": {"content": f"re:{prompt}"}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 9},
        }

    @observe(kind="tool")
    def tool(x: int) -> int:
        return x

    for prompt in ("one", "two", "hand"):
        call(prompt)
    tool(1)
    tool(2)
    first, second, hand = (s for s in spans.all() if s.name == "chat m")
    for span, prompt in ((first, "one"), (second, "two")):
        assert _json(span, "gen_ai.input.messages")[0]["parts"][0]["content"] == prompt
        assert _json(span, "gen_ai.output.messages")[0]["parts"][0]["content"] == f"re:{prompt}"
        assert span.attributes["gen_ai.usage.input_tokens"] == 9
    assert _json(hand, "gen_ai.output.messages")[0]["parts"][0]["content"] == "by hand"
    assert hand.attributes["gen_ai.usage.input_tokens"] == 1
    tools = [s for s in spans.all() if s.name == "execute_tool tool"]
    assert [_json(s, "gen_ai.tool.call.arguments") for s in tools] == [{"x": 1}, {"x": 2}]
    assert len({s.attributes["gen_ai.tool.call.id"] for s in tools}) == 2


async def test_conversation_id_argument_reaches_the_agents_children(spans: Spans) -> None:
    @observe(kind="tool")
    def tool() -> int:
        return 1

    @observe(kind="agent")
    def agent(question: str, session_id: str | None = None) -> str:
        tool()
        return question

    @observe(kind="agent")
    async def async_agent(question: str, conversation_id: str) -> str:
        tool()
        return question

    agent("q", session_id="s-1")
    await async_agent("q", conversation_id="c-2")
    agent("q")
    tool()
    ids = [s.attributes.get("gen_ai.conversation.id") for s in spans.all()]
    # tool, agent, tool, async agent, tool, agent (no id), tool outside any agent
    assert ids == ["s-1", "s-1", "c-2", "c-2", None, None, None]


def test_retriever_of_plain_strings_uses_positions_as_ids(spans: Spans) -> None:
    @observe(kind="retriever")
    def search(query: str) -> list[str]:
        return ['first "quoted"', "second"]

    search("q")
    search("q")
    for span in spans.all():
        assert _json(span, "gen_ai.retrieval.documents") == [{"id": "0"}, {"id": "1"}]
        assert _json(span, "spanjudge.retrieval.documents.content") == [
            'first "quoted"',
            "second",
        ]
