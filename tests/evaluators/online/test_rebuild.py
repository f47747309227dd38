"""Targets and test-case rebuild from spans: our tracer's shapes and other instrumentations'."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, ToolCall
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import MAX_FIELD_CHARS, MAX_RAW_CHARS, build_case
from spanjudge.evaluators._rebuild.targets import Skip, Target, conversation_target, find_targets
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace, semconv_messages


def _only(rule: Rule, spans: list[SpanRecord]) -> Target:
    targets = find_targets(rule, spans)
    assert len(targets) == 1, targets
    return targets[0]


def _case(rule: Rule, spans: list[SpanRecord]) -> LLMTestCase:
    case = build_case(rule, _only(rule, spans), spans)
    assert isinstance(case, LLMTestCase), case
    return case


def _skip(rule: Rule, target: Target, spans: list[SpanRecord]) -> Skip:
    result = build_case(rule, target, spans)
    assert isinstance(result, Skip), result
    return result


def _rag_turn() -> tuple[Trace, dict[str, SpanRecord]]:
    """agent -> [retriever, tool, llm, later retriever]; the shapes our tracer writes."""
    trace = Trace()
    agent = trace.agent(user="Can I return my shoes?", answer="Yes, within 30 days.")
    retr = trace.retriever(["Returns are accepted within 30 days.", "Refunds take 5 days."], agent)
    tool = trace.tool("order_lookup", {"order_id": 42}, {"status": "delivered"}, agent)
    llm = trace.llm(
        user="Can I return my shoes?",
        answer="Yes, within 30 days.",
        parent=agent,
        system="You are a support bot.",
    )
    late = trace.retriever(["Unrelated doc fetched after the answer."], agent)
    return trace, {"agent": agent, "retriever": retr, "tool": tool, "llm": llm, "late": late}


# ----------------------------------------------------------------------------- targets
def test_find_targets_per_type() -> None:
    trace, s = _rag_turn()
    completion = trace.span(
        "text_completion davinci", s["agent"], {attrs.GEN_AI_OPERATION_NAME: "text_completion"}
    )
    kind_only = trace.span("my_llm", s["agent"], {attrs.SPANJUDGE_KIND: "llm"})
    openllmetry = trace.span("openai.chat", s["agent"], {attrs.LLM_REQUEST_TYPE: "chat"})
    llm_ids = [t.target_id for t in find_targets(Rule(BiasMetric(), target="llm"), trace.spans)]
    assert llm_ids == [s["llm"].span_id, completion.span_id, kind_only.span_id, openllmetry.span_id]

    (agent,) = find_targets(Rule(BiasMetric(), target="agent"), trace.spans)
    assert (agent.target_type, agent.target_id, agent.span_id) == (
        "agent",
        s["agent"].span_id,
        s["agent"].span_id,
    )
    assert agent.trace_id == trace.trace_id and agent.service_name == "shop"
    assert agent.end_unix_nano == s["agent"].end_time_unix_nano

    (whole,) = find_targets(Rule(BiasMetric(), target="trace"), trace.spans)
    assert (whole.target_id, whole.span_id) == (trace.trace_id, s["agent"].span_id)
    assert whole.end_unix_nano == max(x.end_time_unix_nano for x in trace.spans)

    rule = Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation")
    assert find_targets(rule, trace.spans) == []


def test_no_trace_target_until_the_root_arrives() -> None:
    trace, s = _rag_turn()
    without_root = [x for x in trace.spans if x is not s["agent"]]
    assert find_targets(Rule(BiasMetric(), target="trace"), without_root) == []


def test_llm_target_inherits_the_conversation_id_of_its_agent() -> None:
    trace = Trace()
    agent = trace.agent(conversation_id="conv-9")
    trace.llm(parent=agent)
    (target,) = find_targets(Rule(BiasMetric(), target="llm"), trace.spans)
    assert target.conversation_id == "conv-9"


# ----------------------------------------------------------------------------- our shapes
def test_llm_case_from_semconv_messages_and_preceding_siblings() -> None:
    trace, s = _rag_turn()
    case = _case(Rule(FaithfulnessMetric(), target="llm"), trace.spans)
    assert case.input == "Can I return my shoes?"  # the last user message, not the system one
    assert case.actual_output == "Yes, within 30 days."
    # the retriever that ran before the LLM call; not the one after it
    assert case.retrieval_context == [
        "Returns are accepted within 30 days.",
        "Refunds take 5 days.",
    ]
    assert case.tools_called == [
        ToolCall(
            name="order_lookup", input_parameters={"order_id": 42}, output={"status": "delivered"}
        )
    ]
    assert case.metadata == {
        "target_type": "llm",
        "trace_id": trace.trace_id,
        "span_id": s["llm"].span_id,
        "dialect": "spanjudge",
        "context_source": "retrieval",
        "found_by": {
            "input": "spanjudge attributes",
            "actual_output": "spanjudge attributes",
            "retrieval_context": f"span {s['retriever'].span_id} ('retrieval kb'): "
            "spanjudge retriever",
        },
    }


def test_preceding_sibling_subtrees_count_but_not_other_branches() -> None:
    trace = Trace()
    agent = trace.agent()
    step = trace.span(
        "invoke_workflow search", agent, {attrs.GEN_AI_OPERATION_NAME: "invoke_workflow"}
    )
    trace.retriever(["nested doc"], step)  # inside a preceding sibling's subtree: counts
    other = trace.agent(name="other")
    trace.retriever(["other agent's doc"], other)  # not a sibling of the llm span
    trace.llm(parent=agent)
    case = _case(Rule(FaithfulnessMetric(), target="llm"), trace.spans)
    assert case.retrieval_context == ["nested doc"]


def test_agent_case_uses_its_subtree() -> None:
    trace, _ = _rag_turn()
    case = _case(Rule(FaithfulnessMetric(), target="agent"), trace.spans)
    assert case.input == "Can I return my shoes?"
    assert case.actual_output == "Yes, within 30 days."
    assert case.retrieval_context == [
        "Returns are accepted within 30 days.",
        "Refunds take 5 days.",
        "Unrelated doc fetched after the answer.",
    ]
    assert case.tools_called is not None and [t.name for t in case.tools_called] == ["order_lookup"]


def test_trace_case_uses_the_whole_trace() -> None:
    trace = Trace()
    root = trace.span(
        "invoke_workflow handle",
        attributes={
            attrs.GEN_AI_OPERATION_NAME: "invoke_workflow",
            attrs.SPANJUDGE_INPUT: json.dumps({"question": "Do you ship to Norway?"}),
            attrs.SPANJUDGE_OUTPUT: json.dumps("Yes, in 5 days."),
        },
    )
    a1 = trace.agent(parent=root)
    trace.retriever(["Shipping: Norway 5 days."], a1)
    a2 = trace.agent(parent=root)
    trace.retriever(["Shipping is free over 50 EUR."], a2)
    case = _case(Rule(FaithfulnessMetric(), target="trace"), trace.spans)
    assert (case.input, case.actual_output) == ("Do you ship to Norway?", "Yes, in 5 days.")
    assert case.retrieval_context == ["Shipping: Norway 5 days.", "Shipping is free over 50 EUR."]


def test_trace_without_captured_root_falls_back_to_its_turns() -> None:
    trace = Trace()
    root = trace.span("handler")
    trace.agent(user="first question", answer="first answer", parent=root)
    trace.agent(user="second question", answer="second answer", parent=root)
    case = _case(Rule(BiasMetric(), target="trace"), trace.spans)
    assert (case.input, case.actual_output) == ("first question", "second answer")


@pytest.mark.parametrize(
    ("captured_in", "captured_out", "expected_in", "expected_out"),
    [
        ("plain question", "plain answer", "plain question", "plain answer"),
        ({"query": "q?", "top_k": 3}, {"answer": "a!", "sources": []}, "q?", "a!"),
        ({"message": "hello"}, {"response": "hi"}, "hello", "hi"),
        ({"user_message": "only key"}, ["just one"], "only key", "just one"),
        (
            {"user_msg": "hi", "history": [], "k": 3},
            {"text": "The parcel left the depot.", "n": 1},
            "hi",
            "The parcel left the depot.",
        ),
        (
            {"a": "what is in the box", "b": "and where is it"},
            {"note": "read as its JSON", "detail": "it holds prose"},
            '{"a": "what is in the box", "b": "and where is it"}',
            '{"note": "read as its JSON", "detail": "it holds prose"}',
        ),
        (
            {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]},
            7,
            "u",
            "7",
        ),
    ],
)
def test_captured_arguments_and_return_values(
    captured_in: Any, captured_out: Any, expected_in: str, expected_out: str
) -> None:
    trace = Trace()
    trace.agent(
        user=None,
        answer=None,
        **{
            attrs.SPANJUDGE_INPUT: json.dumps(captured_in),
            attrs.SPANJUDGE_OUTPUT: json.dumps(captured_out),
        },
    )
    case = _case(Rule(BiasMetric(), target="agent"), trace.spans)
    assert (case.input, case.actual_output) == (expected_in, expected_out)


@pytest.mark.parametrize(
    ("captured_out", "field"),
    [({"text": "", "n": 1}, "actual_output"), ({"x": 1, "y": 2}, "actual_output")],
)
def test_captured_values_that_are_state_dumps_are_refused(captured_out: Any, field: str) -> None:
    trace = Trace()
    trace.agent(
        user=None,
        answer=None,
        **{
            attrs.SPANJUDGE_INPUT: json.dumps({"user_msg": "hi"}),
            attrs.SPANJUDGE_OUTPUT: json.dumps(captured_out),
        },
    )
    rule = Rule(BiasMetric(), target="agent")
    [target] = find_targets(rule, trace.spans)
    skip = build_case(rule, target, trace.spans)
    assert isinstance(skip, Skip) and skip.error_type == "implausible_field", skip
    assert skip.refusal is not None and (skip.refusal.field, skip.refusal.check) == (
        field,
        "object_dump",
    )


def test_messages_win_over_captured_values() -> None:
    trace = Trace()
    trace.agent(
        user="from messages",
        answer="answer from messages",
        **{attrs.SPANJUDGE_INPUT: json.dumps("captured"), attrs.SPANJUDGE_OUTPUT: '"x"'},
    )
    case = _case(Rule(BiasMetric(), target="agent"), trace.spans)
    assert (case.input, case.actual_output) == ("from messages", "answer from messages")


def test_multi_part_output_and_multi_turn_input() -> None:
    trace = Trace()
    inputs = semconv_messages(("user", "first"), ("assistant", "reply"), ("user", "follow-up"))
    outputs = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Part one."},
                    {"type": "tool_call", "name": "lookup", "arguments": {}},
                    {"type": "text", "content": "Part two."},
                ],
            }
        ]
    )
    trace.llm(**{attrs.GEN_AI_INPUT_MESSAGES: inputs, attrs.GEN_AI_OUTPUT_MESSAGES: outputs})
    case = _case(Rule(BiasMetric(), target="llm"), trace.spans)
    assert (case.input, case.actual_output) == ("follow-up", "Part one.\nPart two.")


def test_tool_arguments_that_are_not_objects() -> None:
    trace = Trace()
    agent = trace.agent()
    trace.tool("echo", ["a", "b"], "plain result", agent)
    trace.tool("noargs", None, None, agent)
    trace.span(
        "execute_tool legacy",
        agent,
        {
            attrs.GEN_AI_OPERATION_NAME: "execute_tool",
            attrs.GEN_AI_TOOL_CALL_ARGUMENTS: "not json {",
            attrs.SPANJUDGE_OUTPUT: json.dumps({"ok": True}),
        },
    )
    case = _case(Rule(BiasMetric(), target="agent"), trace.spans)
    assert case.tools_called == [
        ToolCall(name="echo", input_parameters={"value": ["a", "b"]}, output="plain result"),
        ToolCall(name="noargs"),
        ToolCall(name="legacy", input_parameters={"value": "not json {"}, output={"ok": True}),
    ]


# ----------------------------------------------------------------------------- other shapes
def test_openai_style_messages() -> None:
    trace = Trace()
    trace.llm(
        **{
            attrs.GEN_AI_INPUT_MESSAGES: json.dumps(
                [
                    {"role": "system", "content": "be nice"},
                    {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
                ]
            ),
            attrs.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [{"index": 0, "message": {"role": "assistant", "content": "4"}}]
            ),
        }
    )
    case = _case(Rule(BiasMetric(), target="llm"), trace.spans)
    assert (case.input, case.actual_output) == ("What is 2+2?", "4")


def test_openllmetry_indexed_attributes() -> None:
    trace = Trace()
    trace.span(
        "openai.chat",
        attributes={
            attrs.LLM_REQUEST_TYPE: "chat",
            attrs.GEN_AI_SYSTEM: "openai",
            attrs.GEN_AI_REQUEST_MODEL: "gpt-4o",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "You are terse.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Capital of France?",
            "gen_ai.prompt.10.role": "user",  # numeric, not lexical, order
            "gen_ai.prompt.10.content": "And of Italy?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Rome.",
        },
    )
    case = _case(Rule(BiasMetric(), target="llm"), trace.spans)
    assert (case.input, case.actual_output) == ("And of Italy?", "Rome.")


def test_plain_prompt_and_completion_attributes() -> None:
    trace = Trace()
    trace.span(
        "completion",
        attributes={
            attrs.GEN_AI_OPERATION_NAME: "text_completion",
            attrs.GEN_AI_PROMPT: "Say hi",
            attrs.GEN_AI_COMPLETION: json.dumps([{"role": "assistant", "content": "hi"}]),
        },
    )
    case = _case(Rule(BiasMetric(), target="llm"), trace.spans)
    assert (case.input, case.actual_output) == ("Say hi", "hi")


def test_message_events() -> None:
    trace = Trace()
    trace.span(
        "chat gpt-4o",
        attributes={attrs.GEN_AI_OPERATION_NAME: "chat"},
        events=[
            SpanEvent(attrs.GEN_AI_SYSTEM_MESSAGE_EVENT, 1, {"content": "system text"}),
            SpanEvent(attrs.GEN_AI_USER_MESSAGE_EVENT, 2, {"content": "old question"}),
            SpanEvent(attrs.GEN_AI_USER_MESSAGE_EVENT, 3, {"content": "new question"}),
            SpanEvent(
                attrs.GEN_AI_CHOICE_EVENT,
                4,
                {"index": 0, "message": json.dumps({"role": "assistant", "content": "It ships."})},
            ),
        ],
    )
    case = _case(Rule(BiasMetric(), target="llm"), trace.spans)
    assert (case.input, case.actual_output) == ("new question", "It ships.")


def test_older_content_events() -> None:
    trace = Trace()
    trace.span(
        "chat m",
        attributes={attrs.GEN_AI_OPERATION_NAME: "chat"},
        events=[
            SpanEvent(attrs.GEN_AI_CONTENT_PROMPT_EVENT, 1, {attrs.GEN_AI_PROMPT: "prompt text"}),
            SpanEvent(attrs.GEN_AI_CONTENT_COMPLETION_EVENT, 2, {attrs.GEN_AI_COMPLETION: "it is"}),
        ],
    )
    case = _case(Rule(BiasMetric(), target="llm"), trace.spans)
    assert (case.input, case.actual_output) == ("prompt text", "it is")


def test_semconv_retrieval_documents_with_content() -> None:
    trace = Trace()
    agent = trace.agent()
    trace.span(
        "retrieval docs",
        agent,
        {
            attrs.GEN_AI_OPERATION_NAME: "retrieval",
            attrs.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps(
                [{"id": "d1", "score": 0.9, "content": "doc one"}, {"id": "d2", "text": "doc two"}]
            ),
        },
    )
    case = _case(Rule(FaithfulnessMetric(), target="agent"), trace.spans)
    assert case.retrieval_context == ["doc one", "doc two"]


# ----------------------------------------------------------------------------- conversations
def _conversation() -> tuple[list[SpanRecord], list[SpanRecord]]:
    turns = []
    spans: list[SpanRecord] = []
    for i, start in enumerate([3_000, 1_000, 2_000]):  # listed out of time order
        trace = Trace()
        turn = trace.agent(
            user=f"question {start}", answer=f"answer {start}", conversation_id="c-1", start=start
        )
        # a sub-agent of the same conversation inside the turn: not a turn of its own
        trace.agent(
            name="sub",
            user="sub q",
            answer="sub a",
            parent=turn,
            conversation_id="c-1",
            start=start + 1,
        )
        trace.retriever([f"doc {start}"], turn)
        if i == 0:
            trace.tool("refund", {"order": 1}, "ok", turn)
        turns.append(turn)
        spans.extend(trace.spans)
    other = Trace()
    other.agent(conversation_id="c-2", start=500)
    return spans + other.spans, turns


def test_conversation_turns_in_time_order_without_sub_agents() -> None:
    spans, turns = _conversation()
    target = conversation_target("c-1", spans)
    assert target is not None
    last = max(turns, key=lambda s: s.start_time_unix_nano)
    assert (target.target_type, target.target_id, target.conversation_id) == (
        "conversation",
        "c-1",
        "c-1",
    )
    assert (target.trace_id, target.span_id, target.span) == (last.trace_id, last.span_id, last)
    assert [s.start_time_unix_nano for s in target.turn_spans] == [1_000, 2_000, 3_000]

    case = build_case(
        Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation"), target, spans
    )
    assert isinstance(case, ConversationalTestCase)
    assert [(t.role, t.content) for t in case.turns] == [
        ("user", "question 1000"),
        ("assistant", "answer 1000"),
        ("user", "question 2000"),
        ("assistant", "answer 2000"),
        ("user", "question 3000"),
        ("assistant", "answer 3000"),
    ]
    assert case.turns[1].retrieval_context == ["doc 1000"]
    assert case.turns[5].tools_called == [
        ToolCall(name="refund", input_parameters={"order": 1}, output="ok")
    ]
    assert case.turns[1].tools_called is None


def test_unknown_conversation_has_no_target() -> None:
    spans, _ = _conversation()
    assert conversation_target("nope", spans) is None


def test_conversation_without_any_text_is_skipped_with_a_reason() -> None:
    trace = Trace()
    trace.agent(user=None, answer=None, conversation_id="c-3")
    target = conversation_target("c-3", trace.spans)
    assert target is not None
    skip = _skip(
        Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation"),
        target,
        trace.spans,
    )
    assert skip.missing == ["turns"]
    assert skip.reason.startswith("missing turns:")


# ----------------------------------------------------------------------------- custom build_case
def test_custom_build_case_with_spans_or_spans_and_target() -> None:
    trace, s = _rag_turn()

    def from_spans(spans: list[SpanRecord]) -> LLMTestCase:
        return LLMTestCase(input=f"{len(spans)} spans", actual_output="custom")

    def with_target(spans: list[SpanRecord], target: Target) -> LLMTestCase:
        return LLMTestCase(input=target.target_id, actual_output="custom")

    case = _case(Rule(BiasMetric(), target="llm", build_case=from_spans), trace.spans)
    assert case.input == f"{len(trace.spans)} spans"
    case = _case(Rule(BiasMetric(), target="llm", build_case=with_target), trace.spans)
    assert case.input == s["llm"].span_id


def test_custom_build_case_errors_become_skips() -> None:
    trace, _ = _rag_turn()

    def broken(spans: list[SpanRecord]) -> LLMTestCase:
        raise RuntimeError("no such field")

    rule = Rule(BiasMetric(), target="llm", build_case=broken)
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.reason == "build_case failed: RuntimeError: no such field"

    rule = Rule(BiasMetric(), target="llm", build_case=lambda spans: {"input": "x"})
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.reason.startswith("build_case failed: returned dict")

    rule = Rule(
        FaithfulnessMetric(),
        target="llm",
        build_case=lambda spans: LLMTestCase(input="i", actual_output="o"),
    )
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.missing == ["retrieval_context"]
    assert skip.reason == "missing retrieval_context: build_case gave none"


# ----------------------------------------------------------------------------- missing / bad spans
def test_missing_retrieval_context_names_the_field_and_why() -> None:
    trace = Trace()
    agent = trace.agent()
    trace.llm(parent=agent)
    rule = Rule(FaithfulnessMetric(), target="llm")
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.missing == ["retrieval_context"]
    assert skip.reason.startswith("missing retrieval_context: no retriever spans in this turn")
    # the same trace is fine for a metric that does not need context
    assert isinstance(
        build_case(Rule(BiasMetric(), target="llm"), _only(rule, trace.spans), trace.spans),
        LLMTestCase,
    )


def test_retrievers_without_document_text() -> None:
    trace = Trace()
    agent = trace.agent()
    trace.span("retrieval kb", agent, {attrs.GEN_AI_OPERATION_NAME: "retrieval"})
    rule = Rule(FaithfulnessMetric(), target="agent")
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.missing == ["retrieval_context"]
    assert "carry no document text" in skip.reason


def test_malformed_json_is_a_skip_naming_the_attribute() -> None:
    trace = Trace()
    span = trace.agent(user=None, answer="fine")
    span.attributes[attrs.GEN_AI_INPUT_MESSAGES] = '[{"role": "user", "parts": [{"type": "te'
    span.attributes[attrs.SPANJUDGE_TRUNCATED] = [attrs.GEN_AI_INPUT_MESSAGES]
    rule = Rule(BiasMetric(), target="agent")
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.missing == ["input"]
    assert "gen_ai.input.messages" in skip.reason and "not valid JSON" in skip.reason
    assert "cut by the tracer's size limit" in skip.reason


def test_malformed_messages_fall_back_to_captured_input() -> None:
    trace = Trace()
    trace.agent(
        user=None,
        **{attrs.GEN_AI_INPUT_MESSAGES: "{broken", attrs.SPANJUDGE_INPUT: json.dumps("from args")},
    )
    assert _case(Rule(BiasMetric(), target="agent"), trace.spans).input == "from args"


@pytest.mark.parametrize(
    "bad",
    [
        42,
        3.5,
        True,
        ["a", "b"],
        [1, 2],
        "",
        "null",
        "42",
        '{"role": "user"}',
        '"just a string"',
        "[[[]]]",
    ],
)
def test_odd_message_values_never_raise(bad: Any) -> None:
    trace = Trace()
    trace.agent(user=None, answer="fine", **{attrs.GEN_AI_INPUT_MESSAGES: bad})
    rule = Rule(BiasMetric(), target="agent")
    result = build_case(rule, _only(rule, trace.spans), trace.spans)
    if isinstance(result, Skip):
        assert result.missing == ["input"]
    else:
        assert result.input  # e.g. a bare JSON string is a usable prompt


def test_span_without_any_attributes_is_skipped() -> None:
    trace = Trace()
    span = trace.span("invoke_agent bare", attributes={attrs.GEN_AI_OPERATION_NAME: "invoke_agent"})
    rule = Rule(BiasMetric(), target="agent")
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.missing == ["input", "actual_output"]
    assert f"span {span.span_id}" in skip.reason


def test_raw_attributes_over_the_parse_limit_are_not_parsed() -> None:
    trace = Trace()
    huge = semconv_messages(("user", "x" * (MAX_RAW_CHARS + 10)))
    trace.agent(user=None, **{attrs.GEN_AI_INPUT_MESSAGES: huge})
    rule = Rule(BiasMetric(), target="agent")
    skip = _skip(rule, _only(rule, trace.spans), trace.spans)
    assert skip.missing == ["input"]
    assert "parse limit" in skip.reason


def test_rebuilt_fields_are_capped_with_a_marker() -> None:
    trace = Trace()
    agent = trace.agent(user="q" * (MAX_FIELD_CHARS + 500), answer="short")
    trace.retriever(["d" * (MAX_FIELD_CHARS - 10), "second doc", "third doc"], agent)
    case = _case(Rule(FaithfulnessMetric(), target="agent"), trace.spans)
    assert case.input.startswith("q" * MAX_FIELD_CHARS)
    assert case.input.endswith("...[truncated 500 chars]")
    assert case.retrieval_context is not None
    assert sum(len(t) for t in case.retrieval_context) < MAX_FIELD_CHARS + 100
    assert case.retrieval_context[1].startswith("second")  # cut, not dropped
    assert len(case.retrieval_context) == 2
    assert case.metadata is not None
    assert case.metadata["truncated_fields"] == ["retrieval_context", "input"]


def test_target_without_span_is_a_skip() -> None:
    rule = Rule(BiasMetric(), target="llm")
    target = Target("llm", "abc", "t", "abc", None, None, None, None)
    assert _skip(rule, target, []).reason.startswith("the llm target has no span")


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.lists(st.one_of(st.text(max_size=10), st.integers()), max_size=4),
    st.recursive(
        st.one_of(st.none(), st.text(max_size=10), st.integers()),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(
                st.sampled_from(["role", "content", "parts", "type", "text", "message"]),
                children,
                max_size=4,
            ),
        ),
        max_leaves=10,
    ).map(json.dumps),
)
_keys = st.sampled_from(
    [
        attrs.GEN_AI_INPUT_MESSAGES,
        attrs.GEN_AI_OUTPUT_MESSAGES,
        attrs.SPANJUDGE_INPUT,
        attrs.SPANJUDGE_OUTPUT,
        attrs.GEN_AI_PROMPT,
        attrs.GEN_AI_COMPLETION,
        "gen_ai.prompt.0.content",
        attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT,
        attrs.GEN_AI_RETRIEVAL_DOCUMENTS,
        attrs.GEN_AI_TOOL_CALL_ARGUMENTS,
        attrs.GEN_AI_TOOL_CALL_RESULT,
        attrs.GEN_AI_TOOL_NAME,
        attrs.GEN_AI_CONVERSATION_ID,
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    agent_attrs=st.dictionaries(_keys, _values, max_size=6),
    child_attrs=st.dictionaries(_keys, _values, max_size=6),
    child_op=st.sampled_from(["retrieval", "execute_tool", "chat", "invoke_agent"]),
)
def test_arbitrary_attribute_values_never_raise(
    agent_attrs: dict[str, Any], child_attrs: dict[str, Any], child_op: str
) -> None:
    trace = Trace()
    agent = trace.span(
        "invoke_agent a", attributes={attrs.GEN_AI_OPERATION_NAME: "invoke_agent", **agent_attrs}
    )
    trace.span("child", agent, {attrs.GEN_AI_OPERATION_NAME: child_op, **child_attrs})
    trace.llm(parent=agent)
    for rule in (
        Rule(FaithfulnessMetric(), target="agent"),
        Rule(FaithfulnessMetric(), target="llm"),
        Rule(BiasMetric(), target="trace"),
    ):
        for target in find_targets(rule, trace.spans):
            result = build_case(rule, target, trace.spans)
            assert isinstance(result, (LLMTestCase, Skip))
            # bad values are handled on purpose, not by the last-resort catch-all
            assert not (isinstance(result, Skip) and result.reason.startswith("rebuild failed"))
    conv = agent.conversation_id
    if conv is not None:
        target = conversation_target(conv, trace.spans)
        assert target is not None
        result = build_case(
            Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation"),
            target,
            trace.spans,
        )
        assert isinstance(result, (ConversationalTestCase, Skip))
        assert not (isinstance(result, Skip) and result.reason.startswith("rebuild failed"))


def test_evaluation_spans_in_the_trace_are_never_targets() -> None:
    trace, s = _rag_turn()
    ends = max(x.end_time_unix_nano for x in trace.spans)
    evaluation = trace.span(
        "evaluation faithfulness",
        s["llm"],
        {attrs.GEN_AI_EVALUATION_NAME: "faithfulness", attrs.GEN_AI_OPERATION_NAME: "chat"},
        start=ends + 1_000,
    )
    llm_ids = [t.target_id for t in find_targets(Rule(BiasMetric(), target="llm"), trace.spans)]
    assert llm_ids == [s["llm"].span_id]
    (whole,) = find_targets(Rule(BiasMetric(), target="trace"), trace.spans)
    assert whole.end_unix_nano == ends < evaluation.end_time_unix_nano


def test_conversation_of_llm_spans_when_no_agent_spans() -> None:
    first, second = Trace(), Trace()
    first.llm(user="hello", answer="hi there", **{attrs.GEN_AI_CONVERSATION_ID: "c-llm"})
    second.llm(user="bye", answer="goodbye", **{attrs.GEN_AI_CONVERSATION_ID: "c-llm"})
    spans = second.spans + first.spans
    target = conversation_target("c-llm", spans)
    assert target is not None and target.span_id == second.spans[0].span_id
    case = build_case(
        Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation"), target, spans
    )
    assert isinstance(case, ConversationalTestCase)
    assert [t.content for t in case.turns] == ["hello", "hi there", "bye", "goodbye"]
