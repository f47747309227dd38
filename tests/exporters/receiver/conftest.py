"""Fixtures for the OTLP/HTTP receiver tests: SDK-made spans and their wire encodings."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from spanjudge._core.span_record import SpanRecord
from spanjudge.tracer import _attributes as attrs


class ListSink:
    """A thread-safe sink that keeps every batch it was given."""

    def __init__(self) -> None:
        self.batches: list[list[SpanRecord]] = []
        self._lock = threading.Lock()

    def __call__(self, records: list[SpanRecord]) -> None:
        with self._lock:
            self.batches.append(list(records))

    @property
    def records(self) -> list[SpanRecord]:
        with self._lock:
            return [r for batch in self.batches for r in batch]


@pytest.fixture
def list_sink() -> ListSink:
    return ListSink()


def make_sdk_spans() -> list[ReadableSpan]:
    """A small agent trace made by the real SDK: root SERVER span, an LLM child with events,
    array attributes and an error status."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("spanjudge")
    with tracer.start_as_current_span("invoke_agent support", kind=SpanKind.SERVER) as root:
        root.set_attribute(attrs.GEN_AI_OPERATION_NAME, "invoke_agent")
        root.set_attribute(attrs.GEN_AI_CONVERSATION_ID, "conv-1")
        with tracer.start_as_current_span("chat gpt-4o-mini") as llm:
            llm.set_attribute(attrs.GEN_AI_OPERATION_NAME, "chat")
            llm.set_attribute(attrs.GEN_AI_USAGE_INPUT_TOKENS, 12)
            llm.set_attribute(attrs.GEN_AI_RESPONSE_FINISH_REASONS, ["stop"])
            llm.set_attribute("test.ratio", 0.5)
            llm.set_attribute("test.flag", True)
            llm.add_event("gen_ai.choice", {"index": 0, "text": "héllo ✓"})
            llm.set_status(Status(StatusCode.ERROR, "rate limited"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def protobuf_body(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def _b64_to_hex(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (
                base64.b64decode(v).hex()
                if k in ("traceId", "spanId", "parentSpanId")
                else _b64_to_hex(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_b64_to_hex(v) for v in node]
    return node


def json_body(spans: Sequence[ReadableSpan]) -> bytes:
    """OTLP/JSON as the spec writes it: protobuf JSON mapping with hex ids, int64 as strings."""
    as_dict = json_format.MessageToDict(encode_spans(spans))
    return json.dumps(_b64_to_hex(as_dict)).encode()
