"""Capture policy: size limit, redaction, PII, content opt-out, and values that fight back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from hypothesis import given, settings
from hypothesis import strategies as st

from spanjudge import configure, observe
from spanjudge.tracer import _capture as capture
from tests.tracer.conftest import Spans


def test_long_values_are_cut_with_a_visible_marker(spans: Spans) -> None:
    capture.set_policy(max_value_length=50)

    @observe(kind="tool")
    def echo(text: str) -> str:
        return text

    echo("x" * 500)
    echo("y" * 500)  # the second call stages its inputs before the span starts
    for span in spans.all():
        args = span.attributes["gen_ai.tool.call.arguments"]
        result = span.attributes["gen_ai.tool.call.result"]
        assert "[truncated" in args and "[truncated" in result
        assert len(result) < 100
        assert set(span.attributes["spanjudge.truncated"]) == {
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        }


def test_redaction_hook_sees_every_captured_value_first(spans: Spans) -> None:
    seen: list[str] = []

    def redact(key: str, value: str) -> str:
        seen.append(key)
        return value.replace("sk-secret", "[REDACTED]")

    configure(export_otlp=False, redact=redact)

    @observe(kind="llm", model="m")
    def call(prompt: str) -> str:
        return "your key is sk-secret"

    call("my key is sk-secret")
    span = spans.named("chat m")
    dumped = json.dumps(dict(span.attributes))
    assert "sk-secret" not in dumped
    assert dumped.count("[REDACTED]") == 2
    assert {"gen_ai.input.messages", "gen_ai.output.messages"} <= set(seen)


def test_failing_redaction_hook_withholds_the_value(spans: Spans) -> None:
    def redact(key: str, value: str) -> str:
        raise RuntimeError("hook bug")

    capture.set_policy(redact=redact)

    @observe(kind="tool")
    def tool(secret: str) -> str:
        return secret

    before = capture.failures
    assert tool("hunter2") == "hunter2"
    assert capture.failures > before  # counted, never raised
    span = spans.named("execute_tool tool")
    assert span.attributes["gen_ai.tool.call.arguments"] == capture.REDACTION_FAILED
    assert "hunter2" not in json.dumps(dict(span.attributes))


def test_pii_patterns_are_opt_in(spans: Spans) -> None:
    text = "mail jane.doe@example.com, call +1 415-555-0132, card 4111 1111 1111 1111"

    @observe(kind="tool")
    def tool(note: str) -> None:
        return None

    tool(text)
    capture.set_policy(pii=True)
    tool(text)
    plain, masked = (s.attributes["gen_ai.tool.call.arguments"] for s in spans.all())
    assert "jane.doe@example.com" in plain
    assert "jane.doe@example.com" not in masked and "<email>" in masked
    assert "4111" not in masked and "<card>" in masked
    assert "555" not in masked and "<phone>" in masked


def test_pii_masking_leaves_dates_and_ordinary_numbers_alone() -> None:
    text = "(415) 555-0132 on 2024-05-01, order 12345, ref 4111-1111-1111-1112"
    assert capture.mask_pii(text) == ("<phone> on 2024-05-01, order 12345, ref 4111-1111-1111-1112")


def test_content_opt_out_by_environment_keeps_ids_scores_and_tokens(
    spans: Spans, monkeypatch: Any
) -> None:
    monkeypatch.setenv(capture.CONTENT_ENV, "false")
    capture.reset_policy()  # what configure() and process start do

    @observe(kind="retriever")
    def search(query: str) -> list[dict[str, Any]]:
        return [{"id": "d1", "score": 0.9, "content": "secret policy text"}]

    @observe(kind="llm", model="m")
    def call(prompt: str) -> dict[str, Any]:
        return {
            "choices": [{"message": {"content": "secret answer"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6},
        }

    @observe(kind="tool")
    def tool(arg: str) -> str:
        return "secret result"

    search("secret query")
    call("secret prompt")
    tool("secret arg")
    dumped = json.dumps([dict(s.attributes) for s in spans.all()])
    assert "secret" not in dumped
    retrieval = spans.named("retrieval search")
    assert json.loads(retrieval.attributes["gen_ai.retrieval.documents"]) == [
        {"id": "d1", "score": 0.9}
    ]
    llm = spans.named("chat m")
    assert llm.attributes["gen_ai.usage.input_tokens"] == 5
    assert "gen_ai.input.messages" not in llm.attributes
    assert spans.named("execute_tool tool").attributes["gen_ai.tool.call.id"].startswith("call_")


class Cyclic:
    def __init__(self) -> None:
        self.me = self


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class PydanticLike:
    model_fields: ClassVar[dict[str, Any]] = {"a": None}

    def model_dump(self) -> dict[str, Any]:
        return {"a": 1, "nested": BadRepr()}


@dataclass
class Point:
    x: int
    y: list[Any]


def test_hostile_values_are_captured_without_raising(spans: Spans) -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]

    @observe(kind="tool")
    def tool(*values: Any) -> Any:
        return values

    values = (
        cycle,
        Cyclic(),
        BadRepr(),
        b"\xff\xfe bytes",
        PydanticLike(),
        Point(1, [2]),
        deep,
        float("nan"),
        {1: "int key"},
        "z" * 100_000,
    )
    assert tool(*values) == values
    args = json.loads(spans.named("execute_tool tool").attributes["gen_ai.tool.call.arguments"])
    captured = args["values"]
    assert captured[0] == ["<cycle>"]
    assert "\ufffd" in captured[3]
    assert captured[4]["a"] == 1
    assert captured[5] == {"x": 1, "y": [2]}
    assert "<max depth>" in json.dumps(captured[6])
    assert captured[8] == {"1": "int key"}


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
        lambda children: (
            st.lists(children, max_size=5)
            | st.dictionaries(st.text(max_size=5) | st.integers(), children, max_size=5)
            | st.tuples(children, children)
            | st.frozensets(st.integers(), max_size=3)
        ),
        max_leaves=30,
    )
)
def test_serialize_any_value_gives_a_bounded_string(value: Any) -> None:
    capture.reset_policy()
    capture.set_policy(max_value_length=200)
    try:
        text = capture.dumps(value)
        assert isinstance(text, str)
        json.loads(text)  # always valid JSON before the final cut
        final, _ = capture.finish("k", text)
        assert len(final) <= 200 + len(capture.TRUNCATION_MARKER) + 20
    finally:
        capture.reset_policy()


def test_docstring_examples_run() -> None:
    import doctest
    import importlib

    for name in ("spanjudge.tracer", "spanjudge.tracer._capture", "spanjudge.tracer._messages"):
        result = doctest.testmod(importlib.import_module(name))
        assert result.failed == 0 and result.attempted > 0, name
    capture.reset_policy()


class ExplodingModel:
    model_fields: ClassVar[dict[str, Any]] = {}

    def model_dump(self) -> dict[str, Any]:
        raise RuntimeError("broken model")

    def __iter__(self) -> Any:
        raise RuntimeError("broken iter")


def test_objects_that_explode_while_captured_do_not_reach_the_app(spans: Spans) -> None:
    @observe(kind="agent")
    def agent(thing: Any) -> Any:
        return thing

    thing = ExplodingModel()
    assert agent(thing) is thing
    span = spans.named("invoke_agent agent")
    assert "ExplodingModel" in span.attributes["gen_ai.input.messages"]
    assert "ExplodingModel" in span.attributes["gen_ai.output.messages"]


def test_a_response_with_a_million_choices_captures_the_first_thousand(spans: Spans) -> None:
    # the hostile-capture property test found it: {"choices": [0] * 1_000_000} made the llm span
    # convert a million choices (minutes, over 10 GB) before the length limit cut the text
    capture.set_policy(max_value_length=10**7)
    choice = {"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    response = {"choices": [choice] * 1_000_000}

    @observe(kind="llm")
    def chat(messages: list[dict[str, str]]) -> Any:
        return response

    asked = [{"role": "user", "content": "hi"}] * 5_000
    assert chat(asked) is response
    (span,) = spans.all()
    output = json.loads(span.attributes["gen_ai.output.messages"])
    assert len(output) == capture.MAX_ITEMS
    assert output[0] == {
        "role": "assistant",
        "parts": [{"type": "text", "content": "ok"}],
        "finish_reason": "stop",
    }
    assert len(json.loads(span.attributes["gen_ai.input.messages"])) == capture.MAX_ITEMS
