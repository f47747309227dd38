"""Rebuild from spans written by the real ``@observe`` tracer (real OTel SDK, in-memory export,
converted with the store exporter's ``span_to_record``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.targets import conversation_target, find_targets
from spanjudge.exporters._convert import span_to_record
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import observe


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    # the global provider can be set once per process: reuse an SDK one if a test set it
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(processor)
    capture.reset_policy()
    yield exporter
    exporter.clear()
    exporter.shutdown()  # a shut-down in-memory exporter drops later spans


@observe("retriever", name="kb")
def search(query: str) -> list[str]:
    return ["Returns are accepted within 30 days.", "Refunds take 5 business days."]


@observe("tool", name="order_lookup")
def order_lookup(order_id: int) -> dict[str, str]:
    return {"status": "delivered"}


@observe("llm", name="gpt-4o-mini")
def chat(prompt: str) -> str:
    return "Yes, you can return them within 30 days."


@observe("agent", name="support")
def support(question: str, conversation_id: str) -> str:
    search(question)
    order_lookup(42)
    return chat(question)


def _records(exporter: InMemorySpanExporter) -> list[SpanRecord]:
    return [span_to_record(s) for s in exporter.get_finished_spans()]


def test_llm_and_agent_cases_from_the_real_tracer(exported: InMemorySpanExporter) -> None:
    support("Can I return my shoes?", conversation_id="conv-1")
    spans = _records(exported)
    for target_type in ("llm", "agent"):
        rule = Rule(FaithfulnessMetric(), target=target_type)
        (target,) = find_targets(rule, spans)
        case = build_case(rule, target, spans)
        assert isinstance(case, LLMTestCase), case
        assert case.input == "Can I return my shoes?"
        assert case.actual_output == "Yes, you can return them within 30 days."
        assert case.retrieval_context == [
            "Returns are accepted within 30 days.",
            "Refunds take 5 business days.",
        ]
        assert case.tools_called is not None
        assert [t.name for t in case.tools_called] == ["order_lookup"]
        assert case.tools_called[0].input_parameters == {"order_id": 42}
        assert case.tools_called[0].output == {"status": "delivered"}


def test_conversation_from_the_real_tracer(exported: InMemorySpanExporter) -> None:
    support("Can I return my shoes?", conversation_id="conv-2")
    support("And my socks?", conversation_id="conv-2")
    spans = _records(exported)
    target = conversation_target("conv-2", spans)
    assert target is not None and len(target.turn_spans) == 2
    rule = Rule(TopicAdherenceMetric(relevant_topics=["returns"]), target="conversation")
    case = build_case(rule, target, spans)
    assert isinstance(case, ConversationalTestCase), case
    assert [t.content for t in case.turns if t.role == "user"] == [
        "Can I return my shoes?",
        "And my socks?",
    ]
    assert case.turns[1].retrieval_context is not None
