"""Spans from other instrumentations in shapes nobody planned for, through a store and a Monitor.

Extends tests/evaluators/online/test_rebuild.py (the pure rebuild functions on odd attribute
values) to the whole loop over both stores: messages that are not JSON, a JSON number, lists of
non-dicts, parts of unknown types, retrieval documents as a dict, tool arguments as bytes,
attributes of the wrong type, no end time, parents that never arrive, and parent-id cycles
(self, pair, ring). Every target ends as a stored result: scored, or skipped with a reason and
``error.type = missing_field`` (counted as ``label=skipped``, emitted with that error type);
no tick raises, and the cycles neither hang the planner nor the rebuild.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge._core import metric_names as names
from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge._demo.judge import start_offline_judge
from spanjudge._store.models import ORPHAN_SETTLE_FACTOR
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace, semconv_messages
from tests.exporters.store.conftest import StoreFactory, backend, store_factory  # noqa: F401
from tests.support.metrics import data_points

SETTLE = 10.0
QUESTION = semconv_messages(("user", "Can I return the blender?"))
ANSWER = semconv_messages(("assistant", "Yes, within 30 days."))
DOCS = json.dumps(["Returns are accepted within 30 days."])


def llm(trace: Trace, parent: SpanRecord | None = None, **overrides: Any) -> SpanRecord:
    attributes: dict[str, Any] = {
        attrs.GEN_AI_OPERATION_NAME: "chat",
        attrs.GEN_AI_REQUEST_MODEL: "other-vendor-model",
        attrs.GEN_AI_INPUT_MESSAGES: QUESTION,
        attrs.GEN_AI_OUTPUT_MESSAGES: ANSWER,
    }
    attributes.update(overrides)
    return trace.span(
        "chat other-vendor-model", parent, {k: v for k, v in attributes.items() if v is not None}
    )


def agent(trace: Trace, parent: SpanRecord | None = None, **overrides: Any) -> SpanRecord:
    attributes: dict[str, Any] = {
        attrs.GEN_AI_OPERATION_NAME: "invoke_agent",
        attrs.GEN_AI_INPUT_MESSAGES: QUESTION,
        attrs.GEN_AI_OUTPUT_MESSAGES: ANSWER,
    }
    attributes.update(overrides)
    return trace.span(
        "invoke_agent foreign", parent, {k: v for k, v in attributes.items() if v is not None}
    )


def retriever(trace: Trace, parent: SpanRecord | None, **overrides: Any) -> SpanRecord:
    attributes = {
        attrs.GEN_AI_OPERATION_NAME: "retrieval",
        attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT: DOCS,
        **overrides,
    }
    return trace.span("retrieval kb", parent, attributes)


def tool(trace: Trace, parent: SpanRecord | None, **overrides: Any) -> SpanRecord:
    attributes = {attrs.GEN_AI_OPERATION_NAME: "execute_tool", attrs.GEN_AI_TOOL_NAME: "lookup"}
    attributes.update(overrides)
    return trace.span("execute_tool lookup", parent, attributes)


def foreign_traces() -> dict[str, list[SpanRecord]]:
    """One trace per odd shape; each holds an agent turn with an LLM call under it."""
    out: dict[str, list[SpanRecord]] = {}

    def turn(
        name: str, agent_overrides: dict[str, Any], llm_overrides: dict[str, Any], extra: Any = None
    ) -> None:
        trace = Trace(service="foreign")
        root = agent(trace, **agent_overrides)
        retriever(trace, root)
        llm(trace, root, **llm_overrides)
        if extra is not None:
            extra(trace, root)
        out[name] = trace.spans

    turn(
        "input not JSON",
        {attrs.GEN_AI_INPUT_MESSAGES: "{not json"},
        {attrs.GEN_AI_INPUT_MESSAGES: "{not json", attrs.GEN_AI_OUTPUT_MESSAGES: "[oops"},
    )
    turn(
        "input a JSON number",
        {attrs.GEN_AI_INPUT_MESSAGES: "42"},
        {attrs.GEN_AI_OUTPUT_MESSAGES: "3.5"},
    )
    turn(
        "list of non-dicts",
        {attrs.GEN_AI_INPUT_MESSAGES: json.dumps([1, None, [2], True])},
        {attrs.GEN_AI_OUTPUT_MESSAGES: json.dumps([[], 7, None])},
    )
    unknown_parts = json.dumps(
        [
            {
                "role": "user",
                "parts": [
                    {"type": "image_url", "url": "http://x"},
                    {"type": 17},
                    {"no": "type"},
                    "plain",
                    None,
                ],
            }
        ]
    )
    turn(
        "parts of unknown types",
        {attrs.GEN_AI_INPUT_MESSAGES: unknown_parts},
        {attrs.GEN_AI_OUTPUT_MESSAGES: unknown_parts.replace('"user"', '"assistant"')},
    )
    turn(
        "documents as a dict",
        {},
        {},
        lambda t, root: retriever(
            t,
            root,
            **{
                attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT: json.dumps({"doc": {"text": 1}}),
                attrs.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps({"id": {"nested": True}}),
            },
        ),
    )
    turn(
        "tool arguments as bytes",
        {},
        {},
        lambda t, root: tool(
            t,
            root,
            **{
                attrs.GEN_AI_TOOL_CALL_ARGUMENTS: b"\xff\x00raw",
                attrs.GEN_AI_TOOL_CALL_RESULT: b'{"ok": tr',
            },
        ),
    )
    turn(
        "attributes of wrong types",
        {
            attrs.GEN_AI_AGENT_NAME: {"not": "a string"},
            attrs.GEN_AI_CONVERSATION_ID: ["conv", 7],
            attrs.GEN_AI_INPUT_MESSAGES: 12345,
            attrs.GEN_AI_OUTPUT_MESSAGES: [1.5, 2.5],
            attrs.SPANJUDGE_KIND: True,
        },
        {
            attrs.GEN_AI_REQUEST_MODEL: 3.5,
            attrs.GEN_AI_INPUT_MESSAGES: {"role": "user"},
            attrs.GEN_AI_OUTPUT_MESSAGES: None,
            attrs.GEN_AI_USAGE_INPUT_TOKENS: "many",
            attrs.SPANJUDGE_TRUNCATED: 99,
        },
    )
    turn(
        "events of wrong shapes",
        {},
        {attrs.GEN_AI_OUTPUT_MESSAGES: None},
        lambda t, root: t.spans[-1].events.extend(
            [
                SpanEvent(attrs.GEN_AI_CHOICE_EVENT, 5, {"message": 17, "content": ["x"]}),
                SpanEvent(attrs.GEN_AI_USER_MESSAGE_EVENT, 6, {"content": '{"role": 1'}),
            ]
        ),
    )

    # no end time (0) on every span
    trace = Trace(service="foreign")
    root = agent(trace)
    llm(trace, root)
    for span in trace.spans:
        span.end_time_unix_nano = 0
    out["missing end time"] = trace.spans

    # parents that never arrive
    trace = Trace(service="foreign")
    orphan = agent(trace)
    orphan.parent_span_id = "feedfacefeedface"
    child = llm(trace, orphan)
    child.parent_span_id = "0badc0de0badc0de"
    out["parents missing"] = trace.spans

    # parent-id cycles: a span its own parent, two spans parents of each other, a ring of four
    trace = Trace(service="foreign")
    selfish = agent(trace, **{attrs.GEN_AI_CONVERSATION_ID: "cycle-conv"})
    selfish.parent_span_id = selfish.span_id
    out["self parent"] = trace.spans

    trace = Trace(service="foreign")
    a = agent(trace, **{attrs.GEN_AI_CONVERSATION_ID: "cycle-conv"})
    b = llm(trace, a)
    a.parent_span_id = b.span_id
    retriever(trace, b)
    out["pair cycle"] = trace.spans

    trace = Trace(service="foreign")
    ring = [agent(trace), llm(trace), agent(trace), retriever(trace, None)]
    for i, span in enumerate(ring):
        span.parent_span_id = ring[(i + 1) % len(ring)].span_id
    out["ring cycle"] = trace.spans
    return out


@pytest.fixture(scope="module")
def judge() -> Any:
    server: ScriptedJudgeServer = start_offline_judge()
    yield server
    server.stop()


@pytest.mark.timeout(90)  # a parent-id cycle that loops would end here, not hang the suite
def test_foreign_spans_are_scored_or_skipped_with_a_reason_and_the_loop_never_raises(
    store_factory: StoreFactory,  # noqa: F811
    judge: ScriptedJudgeServer,
) -> None:
    db = store_factory()
    traces = foreign_traces()
    for spans in traces.values():
        db.write_spans(spans, now=1_000.0)
    reader = InMemoryMetricReader()
    from spanjudge._core.telemetry import Telemetry

    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    exported = InMemorySpanExporter()
    emitter = ScoreEmitter(span_exporter=exported)
    model = judge.judge(max_retries=0)
    now = [1_000.0]
    monitor = Monitor(
        [
            Rule(FaithfulnessMetric(model=model), target="llm"),
            Rule(BiasMetric(model=model), target="agent"),
            Rule(BiasMetric(model=model), target="trace", name="bias-trace"),
            Rule(
                TopicAdherenceMetric(relevant_topics=["returns"], model=model),
                target="conversation",
            ),
        ],
        store=db,
        emitter=emitter,
        telemetry=telemetry,
        clock=lambda: now[0],
        config=MonitorConfig(
            settle_seconds=SETTLE, idle_seconds=SETTLE, retention_seconds=None, max_attempts=1
        ),
    )
    reports = []
    # past the orphan settle time too: traces without a root (the cycles) settle as well
    for step in (SETTLE + 1, ORPHAN_SETTLE_FACTOR * SETTLE + 1):
        now[0] = 1_000.0 + step
        reports.append(monitor.tick())
    assert emitter.force_flush(10)
    results = monitor.results()
    monitor.close()

    assert sum(r.planned_traces for r in reports) == len(traces)
    assert results, "no target was found at all"
    by_trace: dict[str | None, list[Any]] = {}
    for record in results:
        by_trace.setdefault(record.trace_id, []).append(record)
        assert record.status in ("scored", "skipped"), (record.rule, record.error_message)
        if record.status == "skipped":
            assert record.skip_reason
            assert record.error_type == "missing_field"
            # handled on purpose, not by the rebuild's last-resort catch-all
            assert not record.skip_reason.startswith("rebuild failed"), record.skip_reason
        else:
            assert record.score is not None and record.label in ("pass", "fail")

    # every shape with LLM or agent spans produced results for them
    ids = {name: spans[0].trace_id for name, spans in traces.items()}
    for name in traces:
        if name not in ("self parent", "ring cycle"):
            assert ids[name] in by_trace, f"{name}: no result"

    def skipped(name: str, rule: str) -> list[Any]:
        return [r for r in by_trace.get(ids[name], []) if r.rule == rule and r.status == "skipped"]

    (bad_json,) = skipped("input not JSON", "faithfulness-llm")
    assert "not valid JSON" in (bad_json.skip_reason or "")
    (number,) = skipped("input a JSON number", "bias-agent")
    assert "missing input" in (number.skip_reason or "")
    assert skipped("list of non-dicts", "bias-agent")

    # telemetry: every skip counted as such, every emitted span says missing_field
    points = {
        tuple(sorted(p.attributes.items())): p.value
        for name, p in data_points(reader)
        if name == names.EVALUATIONS
    }
    counted_skips = sum(v for k, v in points.items() if ("label", "skipped") in k)
    assert counted_skips == sum(1 for r in results if r.status == "skipped") > 0
    spans = exported.get_finished_spans()
    assert len(spans) == len(results)
    for span in spans:
        if span.attributes.get(attrs.GEN_AI_EVALUATION_SCORE_VALUE) is None:
            assert span.attributes[attrs.ERROR_TYPE] == "missing_field"


@pytest.mark.timeout(60)
def test_cycles_alone_never_hang_target_search_or_rebuild() -> None:
    """The pure path, without a judge: cycles of every length through every rule kind."""
    from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
    from spanjudge.evaluators._rebuild.cases import build_case
    from spanjudge.evaluators._rebuild.targets import Skip, conversation_target, find_targets

    rules = [
        Rule(FaithfulnessMetric(), target="llm"),
        Rule(BiasMetric(), target="agent"),
        Rule(BiasMetric(), target="trace"),
    ]
    for length in (1, 2, 3, 50):
        trace = Trace()
        chain = []
        for i in range(length):
            make = (agent, llm, retriever)[i % 3]
            span = make(trace, None) if make is retriever else make(trace)
            span.attributes[attrs.GEN_AI_CONVERSATION_ID] = "loop"
            chain.append(span)
        for i, span in enumerate(chain):
            span.parent_span_id = chain[(i + 1) % length].span_id
        for rule in rules:
            for target in find_targets(rule, trace.spans):
                assert isinstance(build_case(rule, target, trace.spans), (LLMTestCase, Skip))
        conversation = conversation_target("loop", trace.spans)
        if conversation is None:
            # several agent spans in one ring are each other's ancestors: none is a top turn
            assert sum(1 for s in chain if s.name.startswith("invoke_agent")) > 1
            continue
        topic = Rule(TopicAdherenceMetric(relevant_topics=["x"]), target="conversation")
        case = build_case(topic, conversation, trace.spans)
        assert isinstance(case, (ConversationalTestCase, Skip))
