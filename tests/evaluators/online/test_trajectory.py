"""The trajectory view (issue 28 item 1): the ordered steps of an agent turn, a trace and each
turn of a conversation, read from spans of several dialects; its limits."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from spanjudge.evaluators._rebuild.cases import default_case
from spanjudge.evaluators._rebuild.dialects.tool_calls import requested_tool_calls
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import conversation_target, find_targets
from spanjudge.evaluators._rebuild.trajectory import (
    MAX_STEP_CHARS,
    MAX_STEPS,
    Trajectory,
    trace_trajectory,
    trajectory_for,
    trajectory_of,
)
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace

FIXTURES = Path(__file__).parents[2] / "interop" / "fixtures"
QUESTION = "How long do I have to return a blender?"
ANSWER = "You can return it within 30 days of delivery if you keep the receipt."


def shape(trajectory: Trajectory) -> list[tuple[str, str]]:
    return [(s.kind, s.name) for s in trajectory.steps]


def semconv_call(*parts: dict[str, Any]) -> str:
    return json.dumps([{"role": "assistant", "parts": list(parts)}])


# ============================================================ semconv, made up
def agent_turn() -> tuple[Trace, SpanRecord]:
    t = Trace()
    turn = t.agent("support", user="Where is order 7?", answer="It ships tomorrow.")
    t.llm(
        parent=turn,
        **{
            attrs.GEN_AI_OUTPUT_MESSAGES: semconv_call(
                {"type": "tool_call", "id": "c1", "name": "lookup_order", "arguments": {"id": 7}}
            ),
            "gen_ai.tool.definitions": json.dumps(
                [{"type": "function", "name": "lookup_order", "description": "Find an order."}]
            ),
        },
    )
    t.tool("lookup_order", {"id": 7}, {"status": "shipped"}, parent=turn)
    t.retriever(["Orders ship in 2 days."], parent=turn)
    t.llm(parent=turn, answer="It ships tomorrow.")
    return t, turn


def test_an_agent_turn_reads_as_ordered_steps() -> None:
    t, turn = agent_turn()
    trajectory = trajectory_of(SpanTree(t.spans), turn)
    assert shape(trajectory) == [
        ("model_call", "gpt-4o-mini"),
        ("tool_call", "lookup_order"),
        ("retrieval", "retrieval kb"),
        ("model_call", "gpt-4o-mini"),
    ]
    first, tool, retrieval, last = trajectory.steps
    assert [(c.name, c.arguments, c.call_id) for c in first.tool_calls] == [
        ("lookup_order", {"id": 7}, "c1")
    ]
    assert (tool.arguments, tool.result, tool.error) == ({"id": 7}, {"status": "shipped"}, None)
    assert retrieval.result == ["Orders ship in 2 days."]
    assert last.result == "It ships tomorrow."
    assert [s.index for s in trajectory.steps] == [0, 1, 2, 3]
    assert {s.agent for s in trajectory.steps} == {"support"}
    assert trajectory.task == "Where is order 7?"
    assert trajectory.final_output == "It ships tomorrow."
    assert [(d.name, d.description) for d in trajectory.tools_available] == [
        ("lookup_order", "Find an order.")
    ]
    assert trajectory.errors == [] and trajectory.notes == []


def test_tool_errors_come_from_status_error_type_and_exception_events() -> None:
    t = Trace()
    turn = t.agent()
    failed = t.tool("lookup_order", {"id": 1}, parent=turn)
    failed.status_code, failed.status_message = "ERROR", "order not found"
    t.tool("refund", {"id": 1}, parent=turn, **{attrs.ERROR_TYPE: "TimeoutError"})
    raised = t.tool("notify", {"id": 1}, parent=turn)
    raised.events.append(
        SpanEvent("exception", 1, {"exception.type": "KeyError", "exception.message": "'email'"})
    )
    t.tool("ok", {"id": 1}, parent=turn)
    trajectory = trajectory_of(SpanTree(t.spans), turn)
    assert [s.error for s in trajectory.steps] == [
        "order not found",
        "TimeoutError",
        "KeyError: 'email'",
        None,
    ]
    assert [s.name for s in trajectory.tool_errors] == ["lookup_order", "refund", "notify"]
    assert (
        trajectory.errors[0] == 'step 0 tool_call lookup_order {"id": 1} -> error: order not found'
    )


def test_sub_agents_handoffs_and_plans_are_steps() -> None:
    t = Trace()
    turn = t.agent("triage", user="Refund order 7", answer="Done.")
    t.span(
        "plan",
        turn,
        {
            attrs.GEN_AI_OPERATION_NAME: "plan",
            attrs.GEN_AI_OUTPUT_MESSAGES: semconv_call(
                {"type": "text", "content": "1. look up 2. refund"}
            ),
        },
    )
    t.tool("transfer_to_billing", {}, parent=turn)
    billing = t.agent("billing", user="Refund order 7", answer="Refunded.", parent=turn)
    t.tool("refund", {"id": 7}, {"ok": True}, parent=billing)
    t.agent("notifier", user="tell them", answer="Sent.", parent=turn)
    t.span("handoff", turn, {"handoff.from_agent": "notifier", "handoff.to_agent": "triage"})
    trajectory = trajectory_of(SpanTree(t.spans), turn)
    assert shape(trajectory) == [
        ("plan", "plan"),
        ("handoff", "transfer_to_billing"),
        ("agent", "billing"),
        ("tool_call", "refund"),
        ("agent", "notifier"),
        ("handoff", "handoff"),
    ]
    steps = trajectory.steps
    assert (steps[1].handoff_from, steps[1].handoff_to) == ("triage", "billing")
    assert steps[3].agent == "billing"  # the refund ran under the sub-agent
    assert (steps[4].handoff_from, steps[4].handoff_to) == ("billing", "notifier")
    assert (steps[5].handoff_from, steps[5].handoff_to) == ("notifier", "triage")
    assert len(trajectory.handoffs) == 3
    assert trajectory.agents == ["triage", "billing", "notifier"]


def test_a_handoff_span_then_the_next_agent_is_one_handoff() -> None:
    # the OpenAI Agents SDK: the first agent's model asks for transfer_to_billing, the SDK
    # records a handoff span and runs the second agent beside the first
    t = Trace()
    root = t.span("Agent workflow", None, {})
    triage = t.agent("triage", parent=root)
    t.llm(parent=triage)
    t.span("handoff to billing", root, {})
    billing = t.agent("billing", parent=root)
    t.tool("refund", {"id": 7}, parent=billing)
    trajectory = trace_trajectory(SpanTree(t.spans), t.trace_id)
    assert shape(trajectory) == [
        ("agent", "triage"),
        ("model_call", "gpt-4o-mini"),
        ("handoff", "handoff to billing"),
        ("agent", "billing"),
        ("tool_call", "refund"),
    ]
    [handoff] = trajectory.handoffs
    assert (handoff.handoff_from, handoff.handoff_to) == ("triage", "billing")


# ============================================================ other dialects, made up
def test_openinference_flattened_tool_calls_and_tools() -> None:
    t = Trace()
    chain = t.span("agent", None, {"openinference.span.kind": "AGENT", "input.value": QUESTION})
    prefix = "llm.output_messages.0.message.tool_calls"
    t.span(
        "ChatCompletion",
        chain,
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            f"{prefix}.0.tool_call.id": "a",
            f"{prefix}.0.tool_call.function.name": "search",
            f"{prefix}.0.tool_call.function.arguments": '{"q": "blender"}',
            f"{prefix}.1.tool_call.function.name": "lookup",
            f"{prefix}.1.tool_call.function.arguments": '{"id": 7}',
            "llm.tools.0.tool.json_schema": json.dumps(
                {"type": "function", "function": {"name": "search", "description": "Search."}}
            ),
        },
    )
    t.span(
        "search",
        chain,
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "search",
            "input.value": '{"q": "blender"}',
            "output.value": "[]",
        },
    )
    trajectory = trajectory_of(SpanTree(t.spans), chain)
    assert shape(trajectory) == [("model_call", "gpt-4o-mini"), ("tool_call", "search")]
    requested = trajectory.steps[0].tool_calls
    assert [(c.name, c.arguments) for c in requested] == [
        ("search", {"q": "blender"}),
        ("lookup", {"id": 7}),
    ]
    assert trajectory.steps[1].arguments == {"q": "blender"}
    assert [d.name for d in trajectory.tools_available] == ["search"]


OPENAI_CALL = {"id": "c1", "function": {"name": "search", "arguments": '{"q": "x"}'}}


@pytest.mark.parametrize(
    ("message", "call_id"),
    [
        # Strands' gen_ai.choice event: Bedrock toolUse blocks
        ([{"toolUse": {"toolUseId": "c1", "name": "search", "input": {"q": "x"}}}], "c1"),
        # OpenAI tool_calls
        ({"role": "assistant", "tool_calls": [OPENAI_CALL]}, "c1"),
        # OpenAI's legacy function_call, which has no id
        ({"role": "assistant", "function_call": OPENAI_CALL["function"]}, None),
        # Anthropic tool_use beside text
        (
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "x"}},
                ],
            },
            "c1",
        ),
    ],
)
def test_requested_calls_in_event_message_shapes(message: Any, call_id: str | None) -> None:
    t = Trace()
    span = t.span("chat", None, {attrs.GEN_AI_OPERATION_NAME: "chat"})
    span.events.append(SpanEvent("gen_ai.choice", 1, {"message": json.dumps(message)}))
    assert [(c.name, c.arguments, c.call_id) for c in requested_tool_calls(span)] == [
        ("search", {"q": "x"}, call_id)
    ]


# ============================================================ traces, conversations
def test_a_trace_reads_every_span_and_counts_broken_parent_links() -> None:
    t = Trace()
    root = t.span("request", None, {})
    turn = t.agent("support", parent=root)
    t.tool("lookup_order", {"id": 7}, parent=turn)
    orphan = t.tool("refund", {"id": 7})
    orphan.parent_span_id = "ffffffffffffffff"  # its parent never arrived
    trajectory = trace_trajectory(SpanTree(t.spans), t.trace_id)
    assert shape(trajectory) == [
        ("agent", "support"),
        ("tool_call", "lookup_order"),
        ("tool_call", "refund"),
    ]
    assert trajectory.notes == ["1 span(s) whose parent is missing, read in time order"]
    assert trajectory.span_id == root.span_id


def test_a_parent_cycle_is_read_without_hanging() -> None:
    t = Trace()
    a = t.agent("a")
    b = t.tool("x", {}, parent=a)
    a.parent_span_id = b.span_id  # a <-> b
    trajectory = trajectory_of(SpanTree(t.spans), a)
    assert shape(trajectory) == [("tool_call", "x")]
    assert trace_trajectory(SpanTree(t.spans), t.trace_id).notes  # no root: said so


def test_each_conversation_turn_gets_its_trajectory() -> None:
    t = Trace()
    one = t.agent("support", user="Where is 7?", answer="Shipped.", conversation_id="c")
    t.tool("lookup_order", {"id": 7}, parent=one)
    two = t.agent("support", user="And 8?", answer="Lost.", conversation_id="c")
    t.tool("lookup_order", {"id": 8}, parent=two)
    target = conversation_target("c", t.spans)
    assert target is not None
    found = trajectory_for(target, t.spans)
    assert [[s.arguments for s in tr.steps] for tr in found] == [[{"id": 7}], [{"id": 8}]]
    case = default_case(target, t.spans)
    assert isinstance(case, ConversationalTestCase)
    assert [turn.trajectory.task for turn in case.turns if turn.trajectory] == [
        "Where is 7?",
        "And 8?",
    ]


def test_the_rebuilt_case_carries_the_trajectory_and_keeps_it_out_of_dumps() -> None:
    from spanjudge.evaluators._judge.metrics.trajectory_checks import ToolErrorCheck
    from spanjudge.evaluators._plan.rules import Rule

    t, _ = agent_turn()
    [target] = find_targets(Rule(ToolErrorCheck(), target="agent"), t.spans)
    case = default_case(target, t.spans)
    assert isinstance(case, LLMTestCase) and case.trajectory is not None
    assert len(case.trajectory.steps) == 4
    assert "trajectory" not in case.model_dump()


# ============================================================ limits
def test_ten_thousand_steps_are_cut_with_a_marker_in_bounded_memory() -> None:
    t = Trace()
    turn = t.agent()
    big = "x" * (MAX_STEP_CHARS * 3)
    for i in range(10_000):
        t.tool("search", {"q": i}, big, parent=turn)
    tree = SpanTree(t.spans)
    tracemalloc.start()
    trajectory = trajectory_of(tree, turn)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(trajectory.steps) == MAX_STEPS
    assert trajectory.steps_dropped == 10_000 - MAX_STEPS
    assert trajectory.notes == [f"{10_000 - MAX_STEPS} step(s) after the first {MAX_STEPS} dropped"]
    result = trajectory.steps[0].result
    assert len(result) < MAX_STEP_CHARS + 100 and result.endswith("chars]")
    assert trajectory.lines()[-3].startswith("... 9000 more step(s)")
    # kept steps hold cut texts, not the 12,000-char results of 10,000 spans
    assert peak < 60_000_000


def test_a_deep_chain_of_wrappers_is_read() -> None:
    t = Trace()
    turn = t.agent()
    parent = turn
    for _ in range(3_000):
        parent = t.span("step", parent, {})
    t.tool("deep", {}, parent=parent)
    trajectory = trajectory_of(SpanTree(t.spans), turn)
    assert shape(trajectory) == [("tool_call", "deep")]
    assert trajectory.steps[0].agent == "support"


# ============================================================ real recordings
def recorded(library: str) -> list[SpanRecord]:
    paths = sorted((FIXTURES / library).glob("*-traces.pb"))
    return [s for p in paths for s in decode_traces(p.read_bytes(), PROTOBUF)]


def first_turn(library: str) -> Trajectory:
    spans = recorded(library)
    first = min(spans, key=lambda s: s.start_time_unix_nano).trace_id
    tree = SpanTree([s for s in spans if s.trace_id == first])
    turns = [s for s in tree.spans if tree.kind(s) == "agent" and tree.collapsed_into(s) is None]
    return trajectory_of(tree, turns[0])


RETRIEVE_THEN_ANSWER = {
    # library -> (tool name, the model's request is read)
    "openai-agents-otel": ("retrieve_docs", False),  # the SDK writes the request as a repr
    "openai-agents-openinference": ("retrieve_docs", True),
    "strands": ("retrieve_docs", True),
    "strands-latest": ("retrieve_docs", True),
    "google-adk": ("retrieve_docs", True),
    "pydantic-ai": ("retrieve", True),
    "smolagents": ("retrieve_docs", True),
    "llamaindex-openinference": ("retrieve_docs", True),
}


@pytest.mark.parametrize("library", sorted(RETRIEVE_THEN_ANSWER))
def test_recorded_agents_retrieve_then_answer(library: str) -> None:
    tool, requested = RETRIEVE_THEN_ANSWER[library]
    trajectory = first_turn(library)
    assert trajectory.task == QUESTION
    assert trajectory.final_output == ANSWER
    [call] = [s for s in trajectory.steps if s.kind == "tool_call" and s.name == tool]
    assert call.arguments == {"query": QUESTION}
    models = trajectory.model_calls
    asking = [m for m in models if m.tool_calls]
    assert models[-1].index > call.index  # the answer comes after the tool's result
    if requested:
        assert [(c.name, c.arguments) for c in asking[0].tool_calls] == [
            (tool, {"query": QUESTION})
        ]
        assert asking[0].index < call.index
    assert trajectory.errors == []


def test_strands_offers_its_tools() -> None:
    assert [d.name for d in first_turn("strands").tools_available] == ["retrieve_docs"]
