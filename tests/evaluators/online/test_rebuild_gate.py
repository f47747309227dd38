"""The plausibility gate (issue 37): every rebuilt field a metric needs is checked for the shapes
of a misread before a judge sees it; a field that fails is skipped under its own reason, with
the attribute, the check and the rule that reads that shape, and ``explain`` shows it. Values
that look odd but are right pass. Spans are made up (scope and span names no library uses)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from spanjudge._core import metric_names as names
from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge._core.telemetry import SKIP_REASONS, Telemetry
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.cli.app import cli
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.metrics.trajectory_checks import ToolErrorCheck
from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.dialects.text_shapes import CHECKS, failed_check
from spanjudge.evaluators._rebuild.plausibility import IMPLAUSIBLE_FIELD, refusal_of
from spanjudge.evaluators._rebuild.targets import Skip, conversation_target, find_targets
from spanjudge.evaluators._review.explain import OfflineJudge, explain_trace
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace, semconv_messages
from tests.support.metrics import data_points

JUDGE = OfflineJudge()
QUESTION = "Is the Lisbon store open on Sundays?"


def _call(trace: Trace, answer: str, question: str = QUESTION, **extra: Any) -> SpanRecord:
    """A made-up instrumentation's model call (semconv messages, an invented scope)."""
    span = trace.span(
        "zeta.complete",
        attributes={
            attrs.GEN_AI_OPERATION_NAME: "chat",
            attrs.GEN_AI_INPUT_MESSAGES: semconv_messages(("user", question)),
            attrs.GEN_AI_OUTPUT_MESSAGES: semconv_messages(("assistant", answer)),
            **extra,
        },
    )
    span.scope_name = "zeta.instrument"
    return span


def _build(rule: Rule, spans: list[SpanRecord]) -> LLMTestCase | Skip:
    [target] = find_targets(rule, spans)
    built = build_case(rule, target, spans)
    assert isinstance(built, LLMTestCase | Skip)
    return built


def _refused(built: Any, field: str, check: str) -> None:
    assert isinstance(built, Skip), built
    assert built.error_type == IMPLAUSIBLE_FIELD and built.refusal is not None, built
    assert (built.refusal.field, built.refusal.check) == (field, check), built.refusal
    assert built.reason.startswith(f"implausible {field}: {CHECKS[check]} ({check})")


# ============================================================================ one test per check
@pytest.mark.parametrize(
    ("value", "want", "check"),
    [
        ("[[ ## answer ## ]]\n\n[[ ## completed ## ]]", "output", "field_markers"),
        ("### Question:\n\n### Context:\nnothing here", "input", "field_markers"),
        ("<context>the docs</context>\n<question></question>", "input", "field_markers"),
        ("Context: the docs\nQuestion:", "input", "field_markers"),
        ("ZetaMessage(role='user', body='hi')", "input", "placeholder"),
        ("{\"history\": [\"ZetaMessage(role='user', body='hi')\"]}", "input", "placeholder"),
        ("the reply was <zeta.Reply object at 0x7f3a2b1c>", "output", "placeholder"),
        ("seq=3 kind='final' source='planner' ok=True", "output", "placeholder"),
        ('{"step": 4, "done": true, "state": "idle"}', "output", "object_dump"),
        ("[1, 2, 3]", "output", "object_dump"),
        ("end_turn", "output", "status_word"),
        ("COMPLETED", "output", "status_word"),
        ("FinishReason.STOP", "output", "status_word"),
        ("text", "output", "status_word"),
        ("output", "output", "field_name"),
        ("messages", "input", "field_name"),
        ("<div><br/></div>", "output", "markup_only"),
        ("```\n```", "output", "markup_only"),
    ],
)
def test_each_check_recognises_its_shape(value: str, want: str, check: str) -> None:
    assert failed_check(value, want) == check  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("Yes", "output"),  # a one-word answer to a yes/no question
        ("No.", "output"),
        ("Paris", "output"),
        ("42", "output"),
        ("True", "output"),
        ("Stop", "input"),  # an input may be one word
        (
            "Put `[[ ## question ## ]]` before the question and `[[ ## answer ## ]]` after.",
            "output",
        ),
        (
            "A template looks like:\n```\n[[ ## question ## ]]\n...\n[[ ## answer ## ]]\n```",
            "output",
        ),
        ("Answer: yes.\nReason: the store opens at 10 on Sundays.", "output"),
        ("Question: why is the sky blue?", "input"),
        ('{"answer": "Open from ten to six", "confidence": "high"}', "output"),
        ("Use f(x=1) to call it; it returns 2.", "output"),
        ("## Summary\nOpen on Sundays.\n## Details\nFrom 10:00.", "output"),
        ("<b>Open</b> on Sundays", "output"),
        ("👍", "output"),
        ("x=1, y=2", "output"),  # the solution of a system, not a repr
        ("OK", "output"),
        ("None.", "output"),
        ("U.S", "output"),
    ],
)
def test_values_that_look_odd_but_are_right_pass(value: str, want: str) -> None:
    assert failed_check(value, want) is None  # type: ignore[arg-type]


def test_a_one_word_answer_to_a_yes_no_question_is_judged() -> None:
    trace = Trace()
    _call(trace, "Yes")
    case = _build(Rule(BiasMetric(model=JUDGE), target="llm"), trace.spans)
    assert isinstance(case, LLMTestCase) and case.actual_output == "Yes"


def test_an_answer_that_quotes_a_template_is_judged() -> None:
    answer = "Start the field with `[[ ## question ## ]]` and end with `[[ ## completed ## ]]`."
    trace = Trace()
    _call(trace, answer, question="How do I mark a field in the template?")
    case = _build(Rule(BiasMetric(model=JUDGE), target="llm"), trace.spans)
    assert isinstance(case, LLMTestCase) and case.actual_output == answer


def test_a_status_word_read_as_the_answer_is_refused_naming_attribute_check_and_rule() -> None:
    trace = Trace()
    call = _call(trace, "end_turn")
    built = _build(Rule(BiasMetric(model=JUDGE), target="llm"), trace.spans)
    _refused(built, "actual_output", "status_word")
    assert isinstance(built, Skip) and built.refusal is not None
    assert built.refusal.attribute.startswith(f"span {call.span_id} ('zeta.complete')")
    assert "message-like field of a result object" in built.refusal.rule
    assert built.refusal.sample == "end_turn"


def test_each_required_field_is_gated_and_unrequired_ones_are_not() -> None:
    trace = Trace()
    turn = trace.agent(user=QUESTION, answer="Yes, from ten to six.")
    trace.retriever(["<div></div>"], parent=turn)
    faith = _build(Rule(FaithfulnessMetric(model=JUDGE), target="agent"), trace.spans)
    _refused(faith, "retrieval_context[0]", "markup_only")
    # bias needs no retrieval context: the same case is judged
    assert isinstance(
        _build(Rule(BiasMetric(model=JUDGE), target="agent"), trace.spans), LLMTestCase
    )


def test_a_tool_step_holding_a_repr_is_refused_for_trajectory_metrics() -> None:
    trace = Trace()
    turn = trace.agent(user="Refund order 7", answer="Refunded.")
    trace.tool(
        "refund", {"order": 7}, {"receipt": "<zeta.Receipt object at 0x7f00beef>"}, parent=turn
    )
    built = _build(Rule(ToolErrorCheck(), target="agent"), trace.spans)
    assert isinstance(built, Skip) and built.refusal is not None, built
    assert built.refusal.field == "trajectory.steps[0].result"
    assert built.refusal.check == "placeholder"


def test_a_conversation_turn_is_gated() -> None:
    trace = Trace()
    trace.agent(user="Open on Sundays?", answer="Yes.", conversation_id="zeta-9")
    trace.agent(user="From when?", answer="<p></p>", conversation_id="zeta-9")
    target = conversation_target("zeta-9", trace.spans)
    assert target is not None
    metric = TopicAdherenceMetric(relevant_topics=["opening hours"], model=JUDGE)
    built = build_case(Rule(metric, target="conversation"), target, trace.spans)
    assert isinstance(built, Skip) and built.refusal is not None, built
    assert (built.refusal.field, built.refusal.check) == ("turns[3].assistant", "markup_only")


def test_a_custom_build_case_is_not_gated() -> None:
    trace = Trace()
    _call(trace, "Open from ten.")
    mine = LLMTestCase(input="q", actual_output="end_turn")
    rule = Rule(BiasMetric(model=JUDGE), target="llm", build_case=lambda spans, target: mine)
    assert _build(rule, trace.spans) is mine


def test_refusal_of_reads_only_what_the_metric_requires() -> None:
    case = LLMTestCase(input="messages", actual_output="Open.", metadata={"span_id": "ab"})
    refused = refusal_of(case, ("actual_output",))
    assert refused is None
    refused = refusal_of(case, ("input", "actual_output"))
    assert refused is not None and refused.attribute == "span ab (None)"


# ============================================================================ counted and shown
def test_a_refusal_is_counted_under_its_own_reason() -> None:
    assert IMPLAUSIBLE_FIELD in SKIP_REASONS and IMPLAUSIBLE_FIELD == names.IMPLAUSIBLE_FIELD
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    telemetry.prime(["bias-llm"])
    for error_type in (IMPLAUSIBLE_FIELD, IMPLAUSIBLE_FIELD, "missing_field"):
        record = EvaluationRecord(
            rule="bias-llm", metric="bias", target_type="llm", target_id="s", trace_id="t",
            span_id="s", status="skipped", error_type=error_type, skip_reason="why",
        )  # fmt: skip
        telemetry.record_evaluation(record)
    skipped = {
        p.attributes["reason"]: p.value
        for name, p in data_points(reader)
        if name == names.SAMPLER_SKIPPED and p.attributes["rule"] == "bias-llm"
    }
    assert skipped[IMPLAUSIBLE_FIELD] == 2  # missing fields are not refusals
    assert skipped["not_sampled"] == 0


def test_explain_shows_the_refused_field_its_attribute_the_check_and_the_rule() -> None:
    trace = Trace()
    call = _call(trace, "end_turn")
    explanation = explain_trace(
        trace.trace_id, trace.spans, [Rule(BiasMetric(model=JUDGE), target="llm")]
    )
    (line,) = [s for s in explanation.spans if s.span_id == call.span_id]
    (verdict,) = line.rules
    assert verdict.status == "skipped" and verdict.refusal is not None
    assert verdict.refusal.field == "actual_output" and verdict.refusal.check == "status_word"


def test_the_explain_command_prints_the_refusal(tmp_path: Path) -> None:
    trace = Trace()
    call = _call(trace, "end_turn")
    database = tmp_path / "spans.db"
    store = SQLiteStore(str(database))
    store.write_spans(trace.spans, now=1_000.0)
    store.close()
    config = tmp_path / "worker.toml"
    config.write_text(
        f"store_url = {json.dumps('sqlite:///' + str(database))}\n"
        '[[rules]]\nmetric = "bias"\ntarget = "llm"\n'
    )
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["explain", trace.trace_id, "--config", str(config)]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "refused field: actual_output" in out
    assert f"attribute: span {call.span_id} ('zeta.complete')" in out
    assert "check: status_word (a single word that is a status or enum value)" in out
    assert "rule that reads this shape: message-like field of a result object" in out
