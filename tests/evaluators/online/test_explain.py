"""``spanjudge explain``: how each span of a stored trace is read, which rules target it and the
case they would evaluate, without a judge call (issue 12, item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.cli.app import cli
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._review.explain import (
    SHOWN_CHARS,
    Explanation,
    OfflineJudge,
    RuleVerdict,
    SpanExplanation,
    explain_trace,
)
from tests.evaluators.online.spans import Trace

FIXTURES = Path(__file__).parents[2] / "interop" / "fixtures"
QUESTION = "How long do I have to return a blender?"
ANSWER = "You can return it within 30 days of delivery if you keep the receipt."
RETRIEVED = "Items can be returned within 30 days of delivery with the receipt."


def recorded(library: str) -> list[SpanRecord]:
    paths = sorted((FIXTURES / library).glob("*-traces.pb"))
    return [s for p in paths for s in decode_traces(p.read_bytes(), PROTOBUF)]


def first_trace(spans: list[SpanRecord]) -> str:
    return min(spans, key=lambda s: s.start_time_unix_nano).trace_id


class CountingJudge(OfflineJudge):
    calls = 0

    def _complete(self, messages: Any, schema: Any) -> Any:
        CountingJudge.calls += 1
        return super()._complete(messages, schema)


JUDGE = CountingJudge("gpt-4o-mini")


def faithfulness(**kwargs: Any) -> Rule:
    return Rule(FaithfulnessMetric(model=JUDGE), target="llm", **kwargs)


def bias_on_agents(**kwargs: Any) -> Rule:
    return Rule(BiasMetric(model=JUDGE), target="agent", **kwargs)


def topics() -> Rule:
    metric = TopicAdherenceMetric(relevant_topics=["returns", "shipping"], model=JUDGE)
    return Rule(metric, target="conversation")


def span(explanation: Explanation, name: str) -> SpanExplanation:
    (found,) = [line for line in explanation.spans if line.name == name]
    return found


def verdict(line: SpanExplanation, rule: str) -> RuleVerdict:
    (found,) = [v for v in line.rules if v.rule == rule]
    return found


# ============================================================================ the module
def test_a_recorded_openinference_trace_read_span_by_span() -> None:
    spans = recorded("openinference")
    trace_id = first_trace(spans)
    explanation = explain_trace(trace_id, spans, [faithfulness(), bias_on_agents()])

    tree = [(line.depth, line.name, line.dialect, line.kind) for line in explanation.spans]
    assert tree == [
        (0, "support-agent", "openinference", "agent"),
        (1, "retrieve", "openinference", "retriever"),
        (1, "ChatCompletion", "openinference", "llm"),
    ]
    assert {line.conversation_id for line in explanation.spans} == {"sess-42"}
    assert explanation.unrecognised == 0 and explanation.misses == []

    llm = verdict(span(explanation, "ChatCompletion"), "faithfulness-llm")
    assert llm.status == "would evaluate"
    assert llm.case is not None
    assert (llm.case.input, llm.case.actual_output) == (QUESTION, ANSWER)
    assert llm.case.retrieval_context == [RETRIEVED]
    assert llm.case.context_source == "retrieval"
    agent = verdict(span(explanation, "support-agent"), "bias-agent")
    assert agent.case is not None and agent.case.input == QUESTION
    assert span(explanation, "retrieve").rules == []  # no rule targets retrievers
    assert CountingJudge.calls == 0


def test_filter_sampler_and_skip_reasons_are_shown() -> None:
    spans = recorded("openinference")
    trace_id = first_trace(spans)
    rules = [
        faithfulness(filter={"service": "checkout"}, name="refused"),
        faithfulness(sample_rate=0.0, name="never-sampled"),
        faithfulness(context_fallback=False, name="no-context"),
    ]
    hidden = recorded("openinference-hidden")
    explained = explain_trace(trace_id, spans, rules)
    llm = span(explained, "ChatCompletion")
    assert verdict(llm, "refused").status == "filtered"
    assert verdict(llm, "never-sampled").status == "not sampled"
    assert verdict(llm, "no-context").status == "would evaluate"
    assert [m.reason for m in explained.misses] == ["filtered"]

    explained = explain_trace(first_trace(hidden), hidden, [faithfulness()])
    llm = span(explained, "ChatCompletion")
    assert llm.capture_off is not None and "OPENINFERENCE_HIDE_INPUTS" in llm.capture_off
    hidden_verdict = verdict(llm, "faithfulness-llm")
    assert hidden_verdict.status == "skipped" and hidden_verdict.case is None
    assert hidden_verdict.skip is not None and "OPENINFERENCE_HIDE" in hidden_verdict.skip


def test_unrecognised_spans_and_rules_without_a_target() -> None:
    trace = Trace("shop")
    root = trace.span("GET /orders", attributes={"http.method": "GET", "http.route": "/orders"})
    agent = trace.agent(parent=root)
    trace.tool("lookup_order", {"id": 7}, {"status": "shipped"}, parent=agent)
    explanation = explain_trace(trace.trace_id, trace.spans, [faithfulness(), bias_on_agents()])

    http = span(explanation, "GET /orders")
    assert (http.dialect, http.kind, http.depth) == (None, None, 0)
    assert http.attribute_keys == ["http.method", "http.route"]
    assert explanation.unrecognised == 1
    (miss,) = explanation.misses
    assert (miss.rule, miss.reason) == ("faithfulness-llm", "no_span_of_kind")
    assert miss.seen == "agent (spanjudge), tool (spanjudge), 1 unrecognised"
    turn = verdict(span(explanation, "invoke_agent support"), "bias-agent")
    assert turn.case is not None and turn.case.tools_called == ["lookup_order"]
    assert [line.depth for line in explanation.spans] == [0, 1, 2]


def test_long_fields_are_cut_for_reading() -> None:
    trace = Trace("shop")
    trace.agent(user="why " * 200, answer="because\nof\tthis")
    (line,) = explain_trace(trace.trace_id, trace.spans, [bias_on_agents()]).spans
    case = line.rules[0].case
    assert case is not None and case.input is not None
    assert len(case.input) == SHOWN_CHARS + 3 and case.input.endswith("...")
    assert case.actual_output == "because of this"


def test_conversations_show_their_turns_across_traces() -> None:
    spans = recorded("openinference")
    trace_id = first_trace(spans)
    session = [s for s in spans if s.attributes.get("session.id") == "sess-42"]
    alone = explain_trace(trace_id, spans, [topics()])
    (conversation,) = alone.conversations
    assert conversation.conversation_id == "sess-42"
    assert len(conversation.turns) == 1  # only this trace was given
    across = explain_trace(trace_id, spans, [topics()], conversations={"sess-42": session})
    (conversation,) = across.conversations
    assert len(conversation.turns) == 4
    (conv_verdict,) = conversation.rules
    assert conv_verdict.case is not None
    assert conv_verdict.case.turns[:2] == [("user", QUESTION), ("assistant", ANSWER)]
    assert len(conv_verdict.case.turns) == 8


class _Reason(BaseModel):
    reason: str


def test_the_offline_judge_refuses_every_call() -> None:
    judge = OfflineJudge("gpt-4o")
    assert judge.get_model_name() == "gpt-4o"
    with pytest.raises(RuntimeError, match="never calls the judge"):
        judge.generate("prompt", _Reason)


# ============================================================================ the command
@pytest.fixture()
def stored(tmp_path: Path) -> tuple[Path, str]:
    spans = recorded("openinference")
    database = tmp_path / "spans.db"
    store = SQLiteStore(str(database))
    store.write_spans(spans, now=1_000.0)
    store.close()
    config = tmp_path / "worker.toml"
    config.write_text(
        f"store_url = {json.dumps('sqlite:///' + str(database))}\n"
        'judge_model = "gpt-4o-mini"\n'
        '[[rules]]\nmetric = "faithfulness"\ntarget = "llm"\n'
        '[[rules]]\nmetric = "bias"\ntarget = "agent"\nsample_rate = 0.5\n'
        '[[rules]]\nmetric = "topic_adherence"\ntarget = "conversation"\n'
        'params = { relevant_topics = ["returns", "shipping"] }\n'
    )
    return config, first_trace(spans)


def test_explain_prints_how_the_stored_trace_is_read(stored: tuple[Path, str]) -> None:
    config, trace_id = stored
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["explain", trace_id, "--config", str(config)]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"trace {trace_id}: 3 spans, 0 read by no dialect" in out
    assert "support-agent 4af9a436c1c59794  openinference · agent · conversation sess-42" in out
    assert "retrieve 7abf3382c554175a  openinference · retriever" in out
    assert "ChatCompletion 29c7b08b7052938c  openinference · llm" in out
    assert "rule bias-agent (bias on agent): not sampled (sample rate 0.5)" in out
    assert f"input: {QUESTION}" in out and f"output: {ANSWER}" in out
    assert "retrieval context (from retrieval):" in out and RETRIEVED in out
    assert "rule faithfulness-llm (faithfulness on llm): would evaluate" in out
    assert "conversation sess-42: 4 turn(s)" in out
    assert "assistant: Let your wife do it" in out  # the biased turn, from another trace


def test_explain_with_only_a_store_shows_the_reading(stored: tuple[Path, str]) -> None:
    config, trace_id = stored
    database = config.parent / "spans.db"
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["explain", trace_id, "--store", f"sqlite:///{database}"]
    )
    assert result.exit_code == 0, result.output
    assert "openinference · llm" in result.output and "rule " not in result.output
    assert "no rules configured" in result.output


def test_explain_a_trace_that_is_not_stored_exits_2(stored: tuple[Path, str]) -> None:
    config, _ = stored
    result = CliRunner().invoke(cli, ["explain", "0" * 32, "--config", str(config)])
    assert result.exit_code == 2
    assert f"trace {'0' * 32} is not in the store" in result.stderr
    missing = config.parent / "nothing-here.db"
    result = CliRunner().invoke(cli, ["explain", "0" * 32, "--store", f"sqlite:///{missing}"])
    assert result.exit_code == 2 and "no span store at" in result.stderr
    assert not missing.exists()  # explaining never creates a database


def test_explain_loads_no_litellm_and_opens_no_connection(stored: tuple[Path, str]) -> None:
    config, trace_id = stored
    code = (
        "import socket, sys\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError('network use')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from spanjudge.cli.app import cli\n"
        f"cli(['explain', {trace_id!r}, '--config', {str(config)!r}], standalone_mode=False)\n"
        "assert 'litellm' not in sys.modules, 'litellm imported'\n"
        "print('clean')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("clean")
