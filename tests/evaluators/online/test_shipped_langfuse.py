"""The Langfuse Python SDK v3's observations (``@observe(as_type=...)``), read by the readers
shipped in dialects/shipped.py (issue 38, item 4). The recorded spans are held to the interop
scenario in tests/interop/test_conformance.py (fixtures ``langfuse``, ``langfuse-openai``)."""

from __future__ import annotations

import json
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import read_span
from tests.evaluators.online.spans import Trace

QUESTION = "When do parcels leave?"
ANSWER = "Parcels leave within a day."


def _observation(
    kind: str, input: Any, output: Any, scope: str = "langfuse-sdk", **extra: str
) -> SpanRecord:
    """A span as the SDK exports it: input and output JSON (a plain string as it is)."""

    def encoded(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    span = Trace().span(
        "observation",
        attributes={
            "langfuse.observation.type": kind,
            "langfuse.observation.input": encoded(input),
            "langfuse.observation.output": encoded(output),
            **extra,
        },
    )
    span.scope_name = scope
    return span


def _decorated(*args: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": {}}


def test_a_generation_gives_its_messages_question_and_answer() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    view = read_span(_observation("generation", messages, ANSWER))
    assert (view.dialect, view.kind) == ("langfuse-generation", "llm")
    assert (view.input_text, view.output_text) == (QUESTION, ANSWER)
    # the OpenAI integration's output: the assistant message as JSON
    view = read_span(_observation("generation", messages, {"role": "assistant", "content": ANSWER}))
    assert view.output_text == ANSWER


def test_a_retriever_gives_its_query_and_documents() -> None:
    docs = [{"id": "d1", "text": ANSWER}, {"id": "d2", "text": "Returns take a week."}]
    view = read_span(_observation("retriever", _decorated(QUESTION), docs))
    assert (view.dialect, view.kind) == ("langfuse-retriever", "retriever")
    assert view.input_text == QUESTION
    assert view.document_texts == [ANSWER, "Returns take a week."]


def test_an_agent_gives_its_first_argument_answer_and_session() -> None:
    span = _observation("agent", _decorated(QUESTION), ANSWER, **{"session.id": "sess-9"})
    view = read_span(span)
    assert (view.dialect, view.kind) == ("langfuse-agent", "agent")
    assert (view.input_text, view.output_text) == (QUESTION, ANSWER)
    assert view.conversation_id == "sess-9"


def test_a_tool_gives_its_arguments_and_result() -> None:
    view = read_span(_observation("tool", _decorated("d1"), {"status": "shipped"}))
    assert (view.dialect, view.kind) == ("langfuse-tool", "tool")
    assert view.tool is not None
    assert view.tool.arguments == _decorated("d1")
    assert view.tool.result == {"status": "shipped"}


def test_other_observations_and_other_scopes_are_left_to_the_dialects() -> None:
    assert read_span(_observation("span", _decorated(QUESTION), ANSWER)).dialect is None
    other = _observation("generation", [{"role": "user", "content": QUESTION}], ANSWER, "acme")
    assert read_span(other).dialect != "langfuse-generation"
