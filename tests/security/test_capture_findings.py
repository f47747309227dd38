"""Regression tests for what the security suite found (issue 8): each failed before its fix."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from spanjudge import observe
from tests.security.test_hostile_capture import RaisingGetattr
from tests.tracer.conftest import Spans


@pytest.mark.parametrize(
    "chunk",
    [RaisingGetattr(), {"choices": 5}, {"choices": {"a": 1}}],
    ids=["getattr", "int", "dict"],
)
@pytest.mark.parametrize("kind", ["llm", "chain", "agent", "tool"])
def test_hostile_stream_chunks_never_raise_into_the_consumer(
    spans: Spans, chunk: Any, kind: str
) -> None:
    @observe(kind=kind)
    def stream() -> Any:
        yield chunk

    assert len(list(stream())) == 1  # the loop itself must not raise
    gen = stream()
    next(gen)
    gen.close()  # nor close()


def test_lone_surrogates_do_not_cost_the_attribute_at_export(spans: Spans) -> None:
    @observe(kind="llm", model="m")
    def chat(prompt: str) -> str:
        return "answer \udcff"

    chat("question \ud800")
    (span,) = spans.all()
    encoded = encode_spans([span])  # the OTLP exporter's own encoder
    keys = {kv.key for kv in encoded.resource_spans[0].scope_spans[0].spans[0].attributes}
    assert {"gen_ai.input.messages", "gen_ai.output.messages"} <= keys


def test_infinity_is_captured_as_strict_json(spans: Spans) -> None:
    @observe(kind="tool")
    def tool(x: float) -> float:
        return x

    tool(float("inf"))
    (span,) = spans.all()

    def reject(name: str) -> Any:
        raise ValueError(name)

    json.loads(span.attributes["gen_ai.tool.call.arguments"], parse_constant=reject)
