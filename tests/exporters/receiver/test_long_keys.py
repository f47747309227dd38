"""A span whose conversation id the store's indexes cannot take is refused alone, with OTLP's
partial-success answer; the rest of its request is stored (SQLite and PostgreSQL). On
PostgreSQL an 8,000-character gen_ai.conversation.id exceeds the btree entry limit: before,
every retry got a 503 and a Collector dropped the 20 good spans with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from spanjudge._receive.limits import MAX_CONVERSATION_ID_BYTES
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._store.sql import SpanStore
from spanjudge.exporters._store_spans import StoreSpanExporter
from tests.support.stores import drop_schema, open_postgres, schema_name, sqlite_store

PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SpanStore]:
    if request.param == "sqlite":
        with sqlite_store(tmp_path / "spans.db") as opened:
            yield opened
        return
    schema = schema_name("longkeys")
    opened = open_postgres(schema)
    try:
        yield opened
    finally:
        opened.close()
        drop_schema(schema)


def trace_twenty_and_one(exporter: SpanExporter, conversation: str) -> None:
    """20 spans with a short conversation id, then one with ``conversation``, to ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for n in range(20):
        with tracer.start_as_current_span(f"good {n}", attributes={"gen_ai.conversation.id": "c"}):
            pass
    with tracer.start_as_current_span("bad", attributes={"gen_ai.conversation.id": conversation}):
        pass
    provider.force_flush()


def twenty_and_one(conversation: str) -> tuple[ExportTraceServiceRequest, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    trace_twenty_and_one(memory, conversation)
    return encode_spans(memory.get_finished_spans()), memory


def stored_names(store: SpanStore, memory: InMemorySpanExporter) -> set[str]:
    traces = {f"{s.context.trace_id:032x}" for s in memory.get_finished_spans()}
    return {s.name for spans in store.traces_spans(sorted(traces)).values() for s in spans}


def test_an_id_the_index_cannot_take_is_refused_alone_with_partial_success(
    store: SpanStore,
) -> None:
    request, memory = twenty_and_one("x" * 8000)
    client = TestClient(create_receiver_app(sink=store.write_spans))
    answer = client.post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert answer.status_code == 200, answer.text
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 1
    assert "conversation id of 8000 bytes" in partial.error_message
    assert stored_names(store, memory) == {f"good {n}" for n in range(20)}


def test_an_id_at_the_limit_is_stored(store: SpanStore) -> None:
    # multi-byte text counts in bytes: 1024 bytes of 'é' (2 bytes each) is the largest taken
    request, memory = twenty_and_one("é" * (MAX_CONVERSATION_ID_BYTES // 2))
    client = TestClient(create_receiver_app(sink=store.write_spans))
    answer = client.post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert answer.status_code == 200
    assert ExportTraceServiceResponse.FromString(answer.content).partial_success.rejected_spans == 0
    assert len(stored_names(store, memory)) == 21


def test_the_in_process_exporter_drops_the_span_alone(store: SpanStore) -> None:
    exporter = StoreSpanExporter(store, flush_interval=0.01)
    trace_twenty_and_one(exporter, "x" * 8000)
    assert exporter.force_flush(5_000)
    assert exporter.written == 20 and exporter.dropped == {"invalid_span": 1}
    exporter.shutdown()
