"""A span or log record whose time cannot be stored is refused alone, at decode time.

OTLP times are unsigned 64-bit (``fixed64``); the store's time columns are signed 64-bit
(SQLite INTEGER, PostgreSQL BIGINT). A time of 2**63 ns or more used to reach the store, whose
OverflowError turned the whole request into a retryable 503: the good items of the batch were
never stored and a Collector retried the same batch until it dropped it. Checked over HTTP
against a real receiver writing to a real SQLite store.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer
from spanjudge._store.sql import SpanStore
from tests.support.stores import sqlite_store

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
TOO_LATE = 2**63  # the first time a signed 64-bit column cannot hold
LARGEST = 2**64 - 1  # the largest fixed64
_ID_KEYS = ("traceId", "spanId", "parentSpanId")
TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpanStore]:
    with sqlite_store(tmp_path / "spans.db") as opened:
        yield opened


@pytest.fixture
def server(store: SpanStore) -> Iterator[BackgroundServer]:
    app = create_receiver_app(sink=store.write_spans, log_sink=store.write_logs)
    with BackgroundServer(app) as running:
        yield running


def three_spans() -> ExportTraceServiceRequest:
    """One trace of three spans made by the real SDK, encoded by the OTLP exporter's encoder."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("root"):
        for name in ("first", "second"):
            with tracer.start_as_current_span(name):
                pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans())


def _only_spans(request: ExportTraceServiceRequest) -> list[object]:
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _hex_ids(node: object) -> object:
    # OTLP/JSON writes ids as hex where the protobuf JSON mapping writes base64
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_KEYS else _hex_ids(v) for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def _encode(request: ExportTraceServiceRequest | ExportLogsServiceRequest, media: str) -> bytes:
    if media == "protobuf":
        return request.SerializeToString()
    return json.dumps(_hex_ids(json_format.MessageToDict(request))).encode()


@pytest.mark.parametrize("media", ["protobuf", "json"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("start_time_unix_nano", TOO_LATE),
        ("start_time_unix_nano", LARGEST),
        ("end_time_unix_nano", TOO_LATE),
    ],
)
def test_a_span_with_an_unstorable_time_is_rejected_alone(
    server: BackgroundServer, store: SpanStore, media: str, field: str, value: int
) -> None:
    request = three_spans()
    spans = _only_spans(request)
    bad = spans[0]
    setattr(bad, field, value)
    good_ids = sorted(s.span_id.hex() for s in spans[1:])  # type: ignore[attr-defined]
    headers = PB if media == "protobuf" else JS

    response = httpx.post(
        f"{server.url}/v1/traces", content=_encode(request, media), headers=headers
    )

    assert response.status_code == 200, response.text
    if media == "protobuf":
        answer = ExportTraceServiceResponse.FromString(response.content)
    else:
        answer = json_format.Parse(response.text, ExportTraceServiceResponse())
    assert answer.partial_success.rejected_spans == 1
    message = answer.partial_success.error_message
    assert "time" in message and str(value) in message
    trace_id = bad.trace_id.hex()  # type: ignore[attr-defined]
    stored = store.trace_spans(trace_id)
    assert sorted(s.span_id for s in stored) == good_ids


def _log_request(times: list[int]) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    for number, time_ns in enumerate(times, start=1):
        record = records.add()
        record.event_name = "gen_ai.client.inference.operation.details"
        record.time_unix_nano = time_ns
        record.trace_id = TRACE
        record.span_id = number.to_bytes(8, "big")
        record.attributes.add(key="n", value={"int_value": number})
    return request


@pytest.mark.parametrize("media", ["protobuf", "json"])
@pytest.mark.parametrize("value", [TOO_LATE, LARGEST])
def test_a_log_record_with_an_unstorable_time_is_rejected_alone(
    server: BackgroundServer, store: SpanStore, media: str, value: int
) -> None:
    request = _log_request([1_700_000_000_000_000_000, value, 1_700_000_000_000_000_001])
    headers = PB if media == "protobuf" else JS

    response = httpx.post(f"{server.url}/v1/logs", content=_encode(request, media), headers=headers)

    assert response.status_code == 200, response.text
    if media == "protobuf":
        answer = ExportLogsServiceResponse.FromString(response.content)
    else:
        answer = json_format.Parse(response.text, ExportLogsServiceResponse())
    assert answer.partial_success.rejected_log_records == 1
    message = answer.partial_success.error_message
    assert "time" in message and str(value) in message
    stored = store.trace_logs([TRACE.hex()])
    assert sorted(e.attributes["n"] for e in stored) == [1, 3]
