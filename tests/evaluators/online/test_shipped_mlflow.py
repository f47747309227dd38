"""MLflow 3 tracing's default OTLP spans, read by the readers shipped in dialects/shipped.py
(issue 38, item 4): every attribute value is JSON (the span type quoted), inputs and outputs are
JSON documents. The recorded spans are held to the interop scenario in
tests/interop/test_conformance.py (fixtures ``mlflow``, ``mlflow-semconv``)."""

from __future__ import annotations

import json
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import read_span
from tests.evaluators.online.spans import Trace

SCOPE = "mlflow.tracing.provider"
QUESTION = "When do parcels leave?"
ANSWER = "Parcels leave within a day."


def _mlflow_span(trace: Trace, name: str, span_type: str, **attributes: Any) -> SpanRecord:
    """A span as MLflow exports it: every attribute value JSON-encoded."""
    values = {"mlflow.spanType": span_type, **attributes}
    span = trace.span(name, attributes={k: json.dumps(v) for k, v in values.items()})
    span.scope_name = SCOPE
    return span


def _chat(trace: Trace, message_format: str = "openai") -> SpanRecord:
    return _mlflow_span(
        trace,
        "Completions",
        "CHAT_MODEL",
        **{
            "mlflow.message.format": message_format,
            "mlflow.spanInputs": {
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "Answer from the context."},
                    {"role": "user", "content": QUESTION},
                ],
            },
            "mlflow.spanOutputs": {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}}]
            },
        },
    )


def test_an_openai_chat_call_traced_by_mlflow_autolog_is_a_model_call() -> None:
    view = read_span(_chat(Trace()))
    assert (view.dialect, view.kind) == ("mlflow-chat", "llm")
    assert (view.input_text, view.output_text) == (QUESTION, ANSWER)


def test_an_mlflow_retriever_gives_its_documents_page_content() -> None:
    docs = [
        {"page_content": "Parcels leave within a day.", "metadata": {"score": 0.9}, "id": "d1"},
        {"page_content": "Returns take a week.", "metadata": {}, "id": "d2"},
    ]
    span = _mlflow_span(
        Trace(),
        "retrieve",
        "RETRIEVER",
        **{"mlflow.spanInputs": {"query": QUESTION}, "mlflow.spanOutputs": docs},
    )
    view = read_span(span)
    assert (view.dialect, view.kind) == ("mlflow-retriever", "retriever")
    assert view.document_texts == ["Parcels leave within a day.", "Returns take a week."]


def test_an_mlflow_agent_span_gives_its_output_unquoted() -> None:
    span = _mlflow_span(
        Trace(),
        "support-agent",
        "AGENT",
        **{"mlflow.spanInputs": {"question": QUESTION}, "mlflow.spanOutputs": ANSWER},
    )
    view = read_span(span)
    assert (view.dialect, view.kind) == ("mlflow-agent", "agent")
    assert view.output_text == ANSWER  # not '"Parcels leave within a day."'


def test_mlflow_spans_the_readers_do_not_know_are_left_alone() -> None:
    # a chat call in another provider's message format, and a span type with no reader
    assert read_span(_chat(Trace(), message_format="anthropic")).dialect is None
    chain = _mlflow_span(Trace(), "step", "CHAIN", **{"mlflow.spanOutputs": ANSWER})
    assert read_span(chain).dialect is None
    # the same attributes outside MLflow's scope are no MLflow span
    other = _chat(Trace())
    other.scope_name = "acme.tracing"
    assert read_span(other).dialect is None
