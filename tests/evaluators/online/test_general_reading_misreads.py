"""The eight misreads of issue 37, each read by a general rule, on span shapes made up here
(scope and span names no library uses, so a rule keyed on one library's names fails):
context inside the prompt, field-marker templates, reprs nested inside JSON, a status read as
the answer, tool steps that only tool messages record, tools named after their callable, tool
calls in a content log record's body, and capture settings named after the instrumentation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.trajectory_checks import ToolErrorCheck
from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.dialects.capture_switches import GENAI_CAPTURE, SWITCHES
from spanjudge.evaluators._rebuild.dialects.tool_calls import (
    callable_tool_name,
    requested_tool_calls,
)
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import Skip, find_targets
from spanjudge.evaluators._rebuild.trajectory import READ_FROM_TOOL_MESSAGE, trajectory_of
from spanjudge.evaluators._review.explain import OfflineJudge
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace, semconv_messages

JUDGE = OfflineJudge()
QUESTION = "Can I swap the kettle for a bigger one?"
ANSWER = "Yes: swaps are free within 14 days."
DOC = "Swaps are free within 14 days of delivery, for any size."


def _chat(
    trace: Trace,
    user: str = QUESTION,
    answer: str | None = ANSWER,
    parent: SpanRecord | None = None,
    **extra: Any,
) -> SpanRecord:
    a: dict[str, Any] = {
        attrs.GEN_AI_OPERATION_NAME: "chat",
        attrs.GEN_AI_INPUT_MESSAGES: semconv_messages(("user", user)),
    }
    if answer is not None:
        a[attrs.GEN_AI_OUTPUT_MESSAGES] = semconv_messages(("assistant", answer))
    a.update(extra)
    span = trace.span("quill.generate", parent, a)
    span.scope_name = "quill.tracing"
    return span


def _turn(trace: Trace, **attributes: Any) -> SpanRecord:
    span = trace.span(
        "quill.run", attributes={attrs.GEN_AI_OPERATION_NAME: "invoke_agent", **attributes}
    )
    span.scope_name = "quill.tracing"
    return span


def _case(rule: Rule, spans: list[SpanRecord]) -> LLMTestCase:
    [target] = find_targets(rule, spans)
    case = build_case(rule, target, spans)
    assert isinstance(case, LLMTestCase), case
    return case


def _skip(rule: Rule, spans: list[SpanRecord]) -> Skip:
    [target] = find_targets(rule, spans)
    skip = build_case(rule, target, spans)
    assert isinstance(skip, Skip), skip
    return skip


def _found_by(case: LLMTestCase, field: str) -> str:
    return str((case.metadata or {})["found_by"][field])


FAITH = Rule(FaithfulnessMetric(model=JUDGE), target="llm")
BIAS_LLM = Rule(BiasMetric(model=JUDGE), target="llm")
BIAS_AGENT = Rule(BiasMetric(model=JUDGE), target="agent")


# ====================================================================== 1. context in the prompt
def test_a_marked_block_of_documents_in_the_prompt_is_context_not_input() -> None:
    trace = Trace()
    _chat(trace, user=f"<memory>\n{DOC}\n</memory>\n\n{QUESTION}")
    case = _case(FAITH, trace.spans)
    assert case.input == QUESTION
    assert case.retrieval_context == [DOC]
    assert "documents marked in the prompt" in _found_by(case, "input")
    assert "documents marked in the prompt" in _found_by(case, "retrieval_context")


def test_documents_found_elsewhere_in_the_turn_are_taken_out_of_the_prompt() -> None:
    trace = Trace()
    turn = _turn(trace)
    trace.retriever([DOC], parent=turn)
    _chat(trace, user=f"Answer from these notes:\n\n{DOC}\n\n{QUESTION}", parent=turn)
    case = _case(FAITH, trace.spans)
    assert case.retrieval_context == [DOC]
    assert DOC not in case.input and QUESTION in case.input
    assert "retrieved documents taken out of the prompt (1)" in _found_by(case, "input")


def test_a_prompt_without_documents_is_left_as_it_is() -> None:
    trace = Trace()
    turn = _turn(trace)
    trace.retriever([DOC], parent=turn)
    _chat(trace, user=QUESTION, parent=turn)
    case = _case(FAITH, trace.spans)
    assert case.input == QUESTION and "rule:" not in _found_by(case, "input")


# ====================================================================== 2. templates
TEMPLATE_PROMPT = (
    "[[ ## context ## ]]\n" + DOC + "\n\n[[ ## question ## ]]\n" + QUESTION + "\n\n"
    "Respond with the corresponding output fields, starting with the field "
    "`[[ ## answer ## ]]`, and then ending with the marker for `[[ ## completed ## ]]`."
)
TEMPLATE_COMPLETION = (
    "[[ ## reasoning ## ]]\nThe notes allow swaps.\n\n[[ ## answer ## ]]\n"
    + ANSWER
    + "\n\n[[ ## completed ## ]]"
)


def test_a_field_marker_prompt_and_completion_give_the_question_and_the_answer() -> None:
    trace = Trace()
    _chat(trace, user=TEMPLATE_PROMPT, answer=TEMPLATE_COMPLETION)
    case = _case(BIAS_LLM, trace.spans)
    assert (case.input, case.actual_output) == (QUESTION, ANSWER)
    assert "rule: field-marker template" in _found_by(case, "input")
    assert "rule: field-marker template" in _found_by(case, "actual_output")
    # the template's context field is the retrieval context, when no retrieval has text
    assert _case(FAITH, trace.spans).retrieval_context == [DOC]


def test_heading_tag_and_label_templates_are_read_by_the_same_rule() -> None:
    for prompt in (
        f"### Context:\n{DOC}\n\n### Question:\n{QUESTION}\n",
        f"<context>{DOC}</context>\n<question>{QUESTION}</question>",
        f"Context: {DOC}\n\nQuestion: {QUESTION}\nAnswer:",
    ):
        trace = Trace()
        _chat(trace, user=prompt)
        case = _case(BIAS_LLM, trace.spans)
        assert case.input == QUESTION, prompt
        assert "field-marker template" in _found_by(case, "input")


def test_a_template_without_a_question_field_is_refused_naming_the_rule() -> None:
    trace = Trace()
    _chat(trace, user="[[ ## context ## ]]\n" + DOC + "\n\n[[ ## history ## ]]\nnone")
    skip = _skip(BIAS_LLM, trace.spans)
    assert skip.refusal is not None and skip.refusal.check == "field_markers"
    assert skip.refusal.rule.startswith("field-marker template")


# ====================================================================== 3. reprs inside JSON
def _repr(source: str, content: str) -> str:
    return (
        f"id='m{len(content)}' source='{source}' models_usage=None content='{content}' type='Msg'"
    )


def test_the_content_of_a_message_repr_nested_in_json_is_read() -> None:
    trace = Trace()
    turn = _turn(
        trace,
        **{
            "quill.input": json.dumps({"task": [_repr("user", QUESTION)]}),
            "quill.output": json.dumps(
                {"messages": [_repr("user", QUESTION), _repr("helper_agent", ANSWER)]}
            ),
        },
    )
    _chat(trace, parent=turn)
    view = read_span(turn)
    assert view.input_text in (None, QUESTION)  # no dialect reads quill.*: the calls speak
    trace2 = Trace()
    span = _chat(trace2, user=json.dumps([_repr("user", QUESTION)]))
    assert read_span(span).input_text == QUESTION
    assert "content= of a message repr" in read_span(span).found["input"]


def test_a_multi_line_repr_gives_its_answer_field() -> None:
    trace = Trace()
    _chat(trace, answer=f"Verdict(\n    rationale='The notes allow it.',\n    answer='{ANSWER}'\n)")
    case = _case(BIAS_LLM, trace.spans)
    assert (case.input, case.actual_output) == (QUESTION, ANSWER)
    assert "content= of a message repr" in _found_by(case, "actual_output")


def test_a_repr_without_a_text_field_is_refused_or_dropped() -> None:
    trace = Trace()
    _chat(trace, answer="Verdict(\n    rationale='The notes allow it.',\n    score=3\n)")
    skip = _skip(BIAS_LLM, trace.spans)
    assert skip.refusal is not None
    assert (skip.refusal.field, skip.refusal.check) == ("actual_output", "placeholder")


def test_an_ambiguous_repr_is_refused() -> None:
    trace = Trace()
    two = json.dumps(
        ["seq=1 content='first words here' kind='a'", "seq=2 content='other' kind='b'"]
    )
    _chat(trace, user=two)
    skip = _skip(BIAS_LLM, trace.spans)
    assert skip.refusal is not None
    assert (skip.refusal.field, skip.refusal.check) == ("input", "placeholder")


# ====================================================================== 4. a status as the answer
RESULT_OBJECT = {
    "exit_reason": "text",
    "last_message": {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
    "turns": 2,
}


def test_a_result_object_gives_its_message_not_its_status() -> None:
    trace = Trace()
    trace.agent(user=QUESTION, answer=None, **{attrs.SPANJUDGE_OUTPUT: json.dumps(RESULT_OBJECT)})
    case = _case(BIAS_AGENT, trace.spans)
    assert case.actual_output == ANSWER


def test_a_status_word_from_the_turn_gives_way_to_the_last_model_call_s_answer() -> None:
    trace = Trace()
    turn = _turn(trace)
    turn.attributes[attrs.GEN_AI_OUTPUT_MESSAGES] = semconv_messages(("assistant", "completed"))
    turn.attributes[attrs.GEN_AI_INPUT_MESSAGES] = semconv_messages(("user", QUESTION))
    _chat(trace, parent=turn)
    case = _case(BIAS_AGENT, trace.spans)
    assert case.actual_output == ANSWER
    found = _found_by(case, "actual_output")
    assert "the last model call's answer in the turn" in found and "status_word" in found


def test_a_status_word_with_no_model_call_to_check_against_is_refused() -> None:
    trace = Trace()
    turn = _turn(trace)
    turn.attributes[attrs.GEN_AI_OUTPUT_MESSAGES] = semconv_messages(("assistant", "completed"))
    turn.attributes[attrs.GEN_AI_INPUT_MESSAGES] = semconv_messages(("user", QUESTION))
    skip = _skip(BIAS_AGENT, trace.spans)
    assert skip.refusal is not None and skip.refusal.check == "status_word"


# ====================================================================== 5. tools without spans
def _requesting(trace: Trace, parent: SpanRecord, calls: list[dict[str, Any]]) -> SpanRecord:
    span = _chat(trace, answer=None, parent=parent)
    span.attributes[attrs.GEN_AI_OUTPUT_MESSAGES] = json.dumps(
        [{"role": "assistant", "parts": [{"type": "tool_call", **c} for c in calls]}]
    )
    return span


def test_tool_steps_are_built_from_tool_messages_paired_by_call_id_with_their_error() -> None:
    trace = Trace()
    turn = _turn(trace)
    _requesting(
        trace,
        turn,
        [
            {"id": "k1", "name": "lookup_order", "arguments": {"order": "Q-7"}},
            {"id": "k2", "name": "issue_refund", "arguments": {"order": "Q-7"}},
        ],
    )
    answering = _chat(trace, parent=turn)
    answering.attributes[attrs.GEN_AI_INPUT_MESSAGES] = json.dumps(
        [
            {"role": "user", "content": QUESTION},
            {
                "role": "tool",
                "tool_call_id": "k2",
                "content": json.dumps({"error": "card expired"}),
            },
            {"role": "tool", "tool_call_id": "k1", "content": "Order Q-7: kettle, delivered"},
        ]
    )
    trajectory = trajectory_of(SpanTree(trace.spans), turn)
    tools = trajectory.tool_calls
    assert [(s.name, s.arguments, s.read_from) for s in tools] == [
        ("issue_refund", {"order": "Q-7"}, READ_FROM_TOOL_MESSAGE),
        ("lookup_order", {"order": "Q-7"}, READ_FROM_TOOL_MESSAGE),
    ]
    assert tools[0].error == "card expired" and tools[1].error is None
    assert tools[1].result == "Order Q-7: kettle, delivered"
    assert [s.kind for s in trajectory.steps] == [
        "model_call",
        "tool_call",
        "tool_call",
        "model_call",
    ]
    case = _case(BIAS_AGENT, trace.spans)
    assert [c.name for c in case.tools_called or ()] == ["issue_refund", "lookup_order"]
    # the deterministic tool_errors check now sees the failed call
    check = ToolErrorCheck()
    asyncio.run(check.a_measure(_case(Rule(ToolErrorCheck(), target="agent"), trace.spans)))
    assert check.success is False and "issue_refund" in (check.reason or "")


def test_tool_results_without_ids_are_paired_by_order_in_any_block_form() -> None:
    trace = Trace()
    turn = _turn(trace)
    _requesting(trace, turn, [{"name": "check_stock", "arguments": {"sku": "K2"}}])
    answering = _chat(trace, parent=turn)
    answering.attributes[attrs.GEN_AI_INPUT_MESSAGES] = json.dumps(
        [
            {"role": "user", "content": QUESTION},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "content": "warehouse offline", "is_error": True}
                ],
            },
        ]
    )
    (tool,) = trajectory_of(SpanTree(trace.spans), turn).tool_calls
    assert (tool.name, tool.error) == ("check_stock", "warehouse offline")


def test_tool_spans_win_over_tool_messages() -> None:
    trace = Trace()
    turn = _turn(trace)
    _requesting(trace, turn, [{"id": "k1", "name": "lookup_order", "arguments": {"order": 1}}])
    trace.tool("lookup_order", {"order": 1}, "found", parent=turn)
    answering = _chat(trace, parent=turn)
    answering.attributes[attrs.GEN_AI_INPUT_MESSAGES] = json.dumps(
        [{"role": "tool", "tool_call_id": "k1", "content": "found"}]
    )
    tools = trajectory_of(SpanTree(trace.spans), turn).tool_calls
    assert [(t.name, t.read_from) for t in tools] == [("lookup_order", None)]


# ====================================================================== 6. callables
def test_a_tool_named_after_its_callable_is_named_after_the_tool() -> None:
    for name in ("refund.__call__", "Tools.refund", "tool:refund", "shop.Tools.refund"):
        assert callable_tool_name(name) == "refund", name
    for name in ("web.search", "refund", "Delegate work to coworker"):
        assert callable_tool_name(name) == name
    trace = Trace()
    turn = _turn(trace)
    span = trace.span("Tools.refund", turn, {attrs.GEN_AI_OPERATION_NAME: "execute_tool"})
    (step,) = trajectory_of(SpanTree(trace.spans), turn).tool_calls
    assert step.name == "refund" and step.span_id == span.span_id


def test_the_agent_s_recorded_choice_wins_over_the_span_s_name() -> None:
    trace = Trace()
    turn = _turn(trace)
    _requesting(trace, turn, [{"id": "k9", "name": "issue_refund", "arguments": {"order": 1}}])
    trace.span(
        "tool:refund_impl",
        turn,
        {attrs.GEN_AI_OPERATION_NAME: "execute_tool", attrs.GEN_AI_TOOL_CALL_ID: "k9"},
    )
    (step,) = trajectory_of(SpanTree(trace.spans), turn).tool_calls
    assert step.name == "issue_refund"


# ====================================================================== 7. calls in a log body
def test_tool_calls_in_a_choice_log_record_body_are_read() -> None:
    body = {
        "index": 0,
        "finish_reason": "tool_calls",
        "message": {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "lookup_order", "arguments": '{"order": "Q-7"}'}}
            ],
        },
    }  # fmt: skip
    trace = Trace()
    span = trace.span(
        "quill.generate",
        attributes={attrs.GEN_AI_OPERATION_NAME: "chat"},
        events=[
            SpanEvent(attrs.GEN_AI_USER_MESSAGE_EVENT, 1, {"body": {"content": QUESTION}}),
            SpanEvent(attrs.GEN_AI_CHOICE_EVENT, 2, {"body": body}),
        ],
    )
    assert [(c.name, c.arguments, c.call_id) for c in requested_tool_calls(span)] == [
        ("lookup_order", {"order": "Q-7"}, "c1")
    ]
    note = read_span(span).notes.get("actual_output", "")
    assert "tool calls only" in note and "could not be read as text" not in note


# ====================================================================== 8. capture settings
def test_capture_off_names_the_switch_of_the_instrumentation_that_wrote_the_span() -> None:
    reasons = {}
    for scope in ("opentelemetry.util.genai.handler", "quill.tracing", None):
        trace = Trace()
        span = trace.span("quill.generate", attributes={attrs.GEN_AI_OPERATION_NAME: "chat"})
        span.scope_name = scope
        reasons[scope] = _skip(BIAS_LLM, trace.spans).reason
    assert GENAI_CAPTURE in reasons["opentelemetry.util.genai.handler"]
    assert "opentelemetry.util.genai.handler" in reasons["opentelemetry.util.genai.handler"]
    assert GENAI_CAPTURE not in reasons["quill.tracing"]
    assert "'quill.tracing' recorded no message content" in reasons["quill.tracing"]
    assert "no scope name" in reasons[None] and GENAI_CAPTURE not in reasons[None]
    assert "opentelemetry.util.genai" in SWITCHES  # one table, by scope name


def test_hidden_arguments_are_marked_hidden_not_absent() -> None:
    trace = Trace()
    turn = _turn(trace)
    trace.span("quill.generate", turn, {attrs.GEN_AI_OPERATION_NAME: "chat"})  # content off
    for _ in range(2):
        trace.span(
            "execute_tool lookup_order",
            turn,
            {attrs.GEN_AI_OPERATION_NAME: "execute_tool", attrs.GEN_AI_TOOL_NAME: "lookup_order"},
        )
    steps = trajectory_of(SpanTree(trace.spans), turn).tool_calls
    assert [(s.arguments, s.arguments_hidden) for s in steps] == [(None, True), (None, True)]
    assert "arguments hidden" in steps[0].describe()
    # with content on, a call without arguments is one without arguments
    trace = Trace()
    turn = _turn(trace)
    _chat(trace, parent=turn)
    trace.span(
        "execute_tool ping",
        turn,
        {attrs.GEN_AI_OPERATION_NAME: "execute_tool", attrs.GEN_AI_TOOL_NAME: "ping"},
    )
    (step,) = trajectory_of(SpanTree(trace.spans), turn).tool_calls
    assert (step.arguments, step.arguments_hidden) == (None, False)
