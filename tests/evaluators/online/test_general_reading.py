"""The general reading rules (issue 27) on span shapes no dialect knows and no library recorded:
made up here, so they show the rules and not a fixture. A wrapper is collapsed into the call it
wraps, content blocks are read, a turn is inferred from the tree, Python reprs are refused, a
retrieval is recognised by what it returns, a model call by its messages, a session under a name
of its own is found, and nothing blames a capture setting without evidence."""

from __future__ import annotations

import json

from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import Skip, conversation_target, find_targets
from spanjudge.evaluators._review.explain import OfflineJudge, explain_trace
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace, semconv_messages

QUESTION = "Where is my parcel?"
ANSWER = "It left the depot this morning."
DOC = "Parcels leave the depot within one day of the order."
JUDGE = OfflineJudge()


def _case(rule: Rule, spans: list[SpanRecord]) -> LLMTestCase:
    [target] = find_targets(rule, spans)
    case = build_case(rule, target, spans)
    assert isinstance(case, LLMTestCase), case
    return case


def _acme_turn(session: str | None = "acme-7") -> tuple[Trace, dict[str, SpanRecord]]:
    """A framework nobody recorded: an HTTP-ish root, a lookup step returning documents, a
    model-call wrapper that records only Python reprs around the instrumented client's call."""
    trace = Trace()
    root = trace.span(
        "acme.handle_request",
        attributes={"acme.session_id": session} if session else {},
    )
    lookup = trace.span(
        "acme.knowledge.lookup",
        root,
        {
            "acme.output": json.dumps(
                {"results": [{"id": "d1", "score": 0.8, "text": DOC}, {"id": "d2", "text": ""}]}
            )
        },
    )
    junk = trace.span(
        "acme.knowledge.raw",
        root,
        {"openinference.span.kind": "RETRIEVER", "output.value": '["<Doc(id_=d1)>"]'},
    )
    wrapper = trace.span(
        "AcmeLLM.chat",
        root,
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "input.value": "AcmeMessage(role=<Role.USER: 'user'>, text='Where is my parcel?')",
        },
    )
    call = trace.span(
        "chat gpt-4o-mini-2024-07-18",
        wrapper,
        {
            attrs.GEN_AI_OPERATION_NAME: "chat",
            attrs.GEN_AI_REQUEST_MODEL: "gpt-4o-mini-2024-07-18",
            attrs.GEN_AI_INPUT_MESSAGES: semconv_messages(("user", QUESTION)),
            attrs.GEN_AI_OUTPUT_MESSAGES: semconv_messages(("assistant", ANSWER)),
        },
    )
    return trace, {"root": root, "lookup": lookup, "junk": junk, "wrapper": wrapper, "call": call}


def test_a_wrapper_around_the_real_call_is_one_target_with_the_call_s_content() -> None:
    trace, s = _acme_turn()
    case = _case(Rule(FaithfulnessMetric(model=JUDGE), target="llm"), trace.spans)
    assert case.metadata is not None
    assert case.metadata["span_id"] == s["call"].span_id
    assert (case.input, case.actual_output) == (QUESTION, ANSWER)
    assert s["wrapper"].span_id in case.metadata["found_by"]["target"]
    assert SpanTree(trace.spans).collapsed_into(s["wrapper"]) is s["call"]


def test_two_model_calls_of_different_models_are_not_collapsed() -> None:
    trace = Trace()
    outer = trace.span(
        "router", attributes={attrs.GEN_AI_OPERATION_NAME: "chat", "gen_ai.request.model": "big"}
    )
    trace.span(
        "draft", outer, {attrs.GEN_AI_OPERATION_NAME: "chat", "gen_ai.request.model": "small"}
    )
    assert len(find_targets(Rule(BiasMetric(model=JUDGE), target="llm"), trace.spans)) == 2


def test_a_turn_is_inferred_where_no_span_is_an_agent_and_speaks_through_its_calls() -> None:
    trace, s = _acme_turn()
    rule = Rule(BiasMetric(model=JUDGE), target="agent")
    case = _case(rule, trace.spans)
    assert case.metadata is not None
    assert case.metadata["span_id"] == s["root"].span_id
    assert case.metadata["found_by"]["target"] == "inferred: top span enclosing model calls"
    assert (case.input, case.actual_output) == (QUESTION, ANSWER)
    assert set(case.metadata["inferred_fields"]) >= {"input", "actual_output"}


def test_inferred_fields_false_skips_an_inferred_case_naming_the_rule() -> None:
    trace, _ = _acme_turn()
    rule = Rule(BiasMetric(model=JUDGE), target="agent", inferred_fields=False)
    [target] = find_targets(rule, trace.spans)
    skip = build_case(rule, target, trace.spans)
    assert isinstance(skip, Skip)
    assert "inferred_fields = false" in skip.reason
    assert "top span enclosing model calls" in skip.reason


def test_a_retrieval_is_recognised_by_the_documents_it_returns_and_reprs_are_refused() -> None:
    trace, s = _acme_turn()
    case = _case(Rule(FaithfulnessMetric(model=JUDGE), target="llm"), trace.spans)
    assert case.retrieval_context == [DOC]  # not the repr, not the empty one
    how = case.metadata["found_by"]["retrieval_context"] if case.metadata else ""
    assert s["lookup"].span_id in how and "returns documents (attribute acme.output)" in how
    assert "retrieval_context" in case.metadata["inferred_fields"]  # type: ignore[index]
    assert "Python repr" in read_span(s["junk"]).notes["retrieval_context"]


def test_a_plain_list_of_strings_is_a_retrieval_only_under_a_searching_name() -> None:
    trace = Trace()
    root = trace.span("app")
    trace.span("split_text", root, {"acme.output": json.dumps(["a chunk", "another"])})
    trace.span("vector.search", root, {"acme.output": json.dumps(["doc one", "doc two"])})
    tree = SpanTree(trace.spans)
    found = [tree.retrieval(s) for s in trace.spans]
    assert [f[0][0].text if f else None for f in found] == [None, None, "doc one"]


def test_reprs_never_become_a_case_field_and_the_reason_says_so() -> None:
    trace = Trace()
    span = trace.span(
        "Acme.generate",
        attributes={
            "openinference.span.kind": "LLM",
            "input.value": json.dumps({"messages": ["ChatMessage(role=<MessageRole.USER>)"]}),
            "output.value": "<acme.Reply object at 0x7f3a2c>",
        },
    )
    view = read_span(span)
    assert view.input_text is None and view.output_text is None
    assert "Python repr" in view.notes["actual_output"]
    assert view.capture_off is None  # content was there; it was not hidden
    [target] = find_targets(Rule(BiasMetric(model=JUDGE), target="llm"), trace.spans)
    skip = build_case(Rule(BiasMetric(model=JUDGE), target="llm"), target, trace.spans)
    assert isinstance(skip, Skip) and "Python repr" in skip.reason


def test_content_blocks_in_every_common_form_are_read() -> None:
    trace = Trace()
    span = trace.span(
        "invoke_model",
        attributes={attrs.GEN_AI_OPERATION_NAME: "chat"},
        events=[
            SpanEvent("gen_ai.user.message", 1, {"content": json.dumps([{"text": QUESTION}])}),
            SpanEvent(  # the prompt's history: an earlier tool request, not the answer
                "gen_ai.assistant.message",
                2,
                {"content": json.dumps([{"toolUse": {"name": "track", "input": {"id": 1}}}])},
            ),
            SpanEvent(
                "gen_ai.choice", 3, {"message": json.dumps([{"type": "text", "text": ANSWER}])}
            ),
        ],
    )
    view = read_span(span)
    assert (view.input_text, view.output_text) == (QUESTION, ANSWER)
    assert view.found["actual_output"] == "event gen_ai.choice"


def test_a_tool_use_only_answer_says_so_and_a_final_answer_tool_is_the_answer() -> None:
    trace = Trace()
    only_tools = trace.span(
        "chat",
        attributes={attrs.GEN_AI_OPERATION_NAME: "chat"},
        events=[
            SpanEvent(
                "gen_ai.choice",
                1,
                {"message": json.dumps([{"toolUse": {"name": "track", "input": {}}}])},
            )
        ],
    )
    assert "tool calls only" in read_span(only_tools).notes["actual_output"]
    final = trace.span(
        "generate",
        attributes={
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "final_answer",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": json.dumps(
                {"answer": ANSWER}
            ),
        },
    )
    assert read_span(final).output_text == ANSWER


def test_a_model_call_is_recognised_by_its_messages_without_any_dialect() -> None:
    trace = Trace()
    root = trace.span("pipeline", attributes={"acme.conversation_id": "c-1"})
    trace.span(
        "component.run",
        root,
        {
            "acme.component.input": json.dumps(
                {"messages": [{"role": "user", "content": [{"text": QUESTION}]}]}
            ),
            "acme.component.output": json.dumps(
                {"replies": [{"role": "assistant", "content": [{"text": ANSWER}], "meta": {}}]}
            ),
        },
    )
    case = _case(Rule(BiasMetric(model=JUDGE), target="llm"), trace.spans)
    assert (case.input, case.actual_output) == (QUESTION, ANSWER)
    assert case.metadata is not None and "inferred" in case.metadata["found_by"]["target"]
    # and the inferred turn carries the session under the library's own name
    target = conversation_target("c-1", trace.spans)
    assert target is not None
    conversation = build_case(
        Rule(TopicAdherenceMetric(relevant_topics=["parcels"], model=JUDGE), "conversation"),
        target,
        trace.spans,
    )
    assert isinstance(conversation, ConversationalTestCase)
    assert [t.content for t in conversation.turns] == [QUESTION, ANSWER]


def test_a_run_span_around_its_agent_span_is_evaluated_once_and_filters_see_both() -> None:
    trace = Trace()
    run = trace.span("Agent workflow", attributes={attrs.GEN_AI_OPERATION_NAME: "invoke_agent"})
    agent = trace.span(
        "invoke_agent helper",
        run,
        {attrs.GEN_AI_OPERATION_NAME: "invoke_agent", attrs.GEN_AI_AGENT_NAME: "helper"},
    )
    trace.llm(user=QUESTION, answer=ANSWER, parent=agent)
    rule = Rule(BiasMetric(model=JUDGE), target="agent", filter={"agent": "helper"})
    [target] = find_targets(rule, trace.spans)
    assert target.span_id == agent.span_id
    # a sub-agent (a tool call of its own) beside the run's own model call is a second
    # operation, not a wrapper
    trace.tool("track", {"id": 1}, {"at": "depot"}, agent)
    trace.llm(user=QUESTION, answer=ANSWER, parent=run)
    assert len(find_targets(Rule(BiasMetric(model=JUDGE), target="agent"), trace.spans)) == 2


def test_an_agent_without_text_of_its_own_is_not_blamed_on_a_capture_setting() -> None:
    trace = Trace()
    agent = trace.span("invoke_agent a", attributes={attrs.GEN_AI_OPERATION_NAME: "invoke_agent"})
    trace.span("chat m", agent, {attrs.GEN_AI_OPERATION_NAME: "chat"})  # content off
    assert read_span(agent).capture_off is None
    rule = Rule(BiasMetric(model=JUDGE), target="agent")
    [target] = find_targets(rule, trace.spans)
    skip = build_case(rule, target, trace.spans)
    # the reason names the setting from the model call, where the evidence is
    assert isinstance(skip, Skip) and "recorded no message content" in skip.reason
    explained = explain_trace(trace.trace_id, trace.spans, [rule])
    line = next(x for x in explained.spans if x.span_id == agent.span_id)
    assert line.capture_off is None and "no text of its own" in line.notes["text"]


def test_explain_names_the_inference_rules_it_used() -> None:
    trace, s = _acme_turn()
    rules = [Rule(FaithfulnessMetric(model=JUDGE), target="llm")]
    explained = explain_trace(trace.trace_id, trace.spans, rules)
    lines = {x.span_id: x for x in explained.spans}
    assert lines[s["root"].span_id].kind == "agent"
    assert lines[s["root"].span_id].kind_rule == "top span enclosing model calls"
    assert lines[s["lookup"].span_id].kind == "retriever"
    assert lines[s["wrapper"].span_id].collapsed_into == s["call"].span_id
    [verdict] = lines[s["call"].span_id].rules
    assert verdict.case is not None and "retrieval_context" in verdict.case.inferred


def test_sessions_are_found_under_the_names_frameworks_use() -> None:
    def conversation(attributes: dict[str, object]) -> str | None:
        return SpanRecord("a" * 32, "b" * 16, "s", 0, 1, attributes=attributes).conversation_id  # type: ignore[arg-type]

    assert conversation({"gcp.vertex.agent.session_id": "adk-1"}) == "adk-1"
    assert conversation({"langfuse.session.id": "lf-1"}) == "lf-1"
    assert conversation({"agent.thread_id": "t-1"}) == "t-1"
    assert conversation({"metadata": json.dumps({"thread_id": "lg-1", "step": 2})}) == "lg-1"
    # the semconv key wins over a library's own; the OS thread id is never a conversation
    assert conversation({"acme.session_id": "x", attrs.GEN_AI_CONVERSATION_ID: "y"}) == "y"
    assert conversation({"thread.id": 140213, "thread.name": "MainThread"}) is None
    assert conversation({"metadata": json.dumps({"step": 2})}) is None


def test_inferred_fields_is_a_rule_key_in_the_worker_file() -> None:
    from spanjudge.settings import load_settings
    from spanjudge.worker.rule_config import build_rule

    settings = load_settings(
        None,
        store_url="sqlite:///:memory:",
        judge_model="openai/x",
        rules=[{"metric": "bias", "target": "agent", "inferred_fields": False}],
    )
    assert build_rule(settings.rules[0], JUDGE, 0).inferred_fields is False
    assert build_rule(settings.rules[0].model_copy(update={"inferred_fields": True}), JUDGE, 0)


def test_token_usage_in_current_and_older_names() -> None:
    trace = Trace()
    current = trace.span(
        "chat",
        attributes={
            attrs.GEN_AI_OPERATION_NAME: "chat",
            "gen_ai.usage.input_tokens": 12,
            "gen_ai.usage.output_tokens": 3,
        },
    )
    older = trace.span(
        "chat",
        attributes={
            attrs.GEN_AI_OPERATION_NAME: "chat",
            "gen_ai.usage.prompt_tokens": 7,
            "gen_ai.usage.completion_tokens": 2,
        },
    )
    openinference = trace.span(
        "llm",
        attributes={
            "openinference.span.kind": "LLM",
            "llm.token_count.prompt": 5,
            "llm.token_count.completion": 1,
        },
    )
    assert [(read_span(s).input_tokens, read_span(s).output_tokens) for s in trace.spans] == [
        (12, 3),
        (7, 2),
        (5, 1),
    ]
    assert current is not older is not openinference


def test_newer_semconv_operations_are_read() -> None:
    trace = Trace()
    agent = trace.span(
        "invoke_agent a",
        attributes={attrs.GEN_AI_OPERATION_NAME: "invoke_agent", "gen_ai.agent.id": "asst_1"},
    )
    memory = trace.span(
        "search_memory",
        agent,
        {
            attrs.GEN_AI_OPERATION_NAME: "search_memory",
            "gen_ai.memory.records": json.dumps([{"id": "m1", "content": DOC, "score": 0.9}]),
        },
    )
    plan = trace.span("plan", agent, {attrs.GEN_AI_OPERATION_NAME: "plan"})
    assert read_span(agent).agent_name == "asst_1"
    assert read_span(memory).kind == "retriever" and read_span(memory).document_texts == [DOC]
    assert read_span(plan).kind == "chain"


def test_graph_node_spans_inside_an_agent_turn_are_steps_not_sub_agents() -> None:
    """A graph framework marks each node as an agent: one model call per node span, tools in
    sibling nodes. The turn is one evaluation; a real sub-agent (tools of its own) stays one."""
    trace = Trace()
    turn = trace.span("support", attributes={"openinference.span.kind": "AGENT"})
    for step in range(2):
        node = trace.span("agent", turn, {"openinference.span.kind": "AGENT"})
        trace.llm(user=QUESTION, answer=ANSWER if step else "", parent=node)
        trace.span("tools", turn, {"openinference.span.kind": "CHAIN"})
    rule = Rule(BiasMetric(model=JUDGE), target="agent")
    assert [t.span_id for t in find_targets(rule, trace.spans)] == [turn.span_id]
    sub = trace.span("billing", turn, {"openinference.span.kind": "AGENT"})
    trace.llm(user=QUESTION, answer=ANSWER, parent=sub)
    trace.tool("refund", {"order": 1}, {"ok": True}, sub)
    assert {t.span_id for t in find_targets(rule, trace.spans)} == {turn.span_id, sub.span_id}
