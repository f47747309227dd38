"""The OTLP/HTTP receiver app: encodings, auth, limits, error bodies, backpressure, health."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from spanjudge._core import metric_names as names
from spanjudge._core.span_record import SpanRecord
from spanjudge._core.telemetry import Telemetry
from spanjudge._receive.http import Backpressure
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer
from spanjudge.exporters._convert import span_to_record
from tests.exporters.receiver.conftest import ListSink, json_body, make_sdk_spans, protobuf_body
from tests.support.metrics import labelled_values

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


def client(sink: Callable[[list[SpanRecord]], None], **kwargs: Any) -> TestClient:
    return TestClient(create_receiver_app(sink=sink, **kwargs))


def test_protobuf_body_reaches_sink_and_gets_protobuf_response(list_sink: ListSink) -> None:
    spans = make_sdk_spans()
    response = client(list_sink).post("/v1/traces", content=protobuf_body(spans), headers=PB)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    ExportTraceServiceResponse.FromString(response.content)  # a valid response message
    assert list_sink.records == [span_to_record(s) for s in spans]


def test_json_body_with_charset_gets_json_response(list_sink: ListSink) -> None:
    spans = make_sdk_spans()
    headers = {"Content-Type": "application/json; charset=utf-8"}
    response = client(list_sink).post("/v1/traces", content=json_body(spans), headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {}
    assert list_sink.records == [span_to_record(s) for s in spans]


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_gzip_bodies(list_sink: ListSink, encoding: str) -> None:
    spans = make_sdk_spans()
    raw, headers = (protobuf_body(spans), PB) if encoding == "protobuf" else (json_body(spans), JS)
    response = client(list_sink).post(
        "/v1/traces", content=gzip.compress(raw), headers={**headers, "Content-Encoding": "gzip"}
    )
    assert response.status_code == 200
    assert len(list_sink.records) == 2


def test_auth(list_sink: ListSink) -> None:
    c = client(list_sink, bearer_token="s3cret")
    body = protobuf_body(make_sdk_spans())
    ok = c.post("/v1/traces", content=body, headers={**PB, "Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    missing = c.post("/v1/traces", content=body, headers=PB)
    wrong = c.post("/v1/traces", content=body, headers={**PB, "Authorization": "Bearer s3creT"})
    basic = c.post("/v1/traces", content=body, headers={**PB, "Authorization": "Basic s3cret"})
    for denied in (missing, wrong, basic):
        assert denied.status_code == 401
        assert denied.headers["www-authenticate"].startswith("Bearer")
        assert status_pb2.Status.FromString(denied.content).code == 16
    assert len(list_sink.batches) == 1
    # Health stays open without a token: probes do not carry one.
    assert c.get("/healthz").status_code == 200


def test_413_by_content_length_header(list_sink: ListSink) -> None:
    c = client(list_sink, max_body_bytes=100)
    response = c.post("/v1/traces", content=b"x" * 101, headers=JS)
    assert response.status_code == 413
    assert "limit of 100 bytes" in response.json()["message"]
    assert list_sink.batches == []


def test_413_for_gzip_bomb(list_sink: ListSink) -> None:
    bomb = gzip.compress(b" " * (16 * 2**20), compresslevel=9)
    c = client(list_sink, max_decompressed_bytes=2**20)
    response = c.post("/v1/traces", content=bomb, headers={**JS, "Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "decompressed" in response.json()["message"]


def test_413_uncompressed_over_decompressed_limit(list_sink: ListSink) -> None:
    c = client(list_sink, max_body_bytes=1000, max_decompressed_bytes=10)
    assert c.post("/v1/traces", content=b"{}" * 10, headers=JS).status_code == 413


def test_malformed_bodies_get_400_with_a_message(list_sink: ListSink) -> None:
    c = client(list_sink)
    bad_pb = c.post("/v1/traces", content=b"\x0a\xff\xff\xff\xff\x0f", headers=PB)
    assert bad_pb.status_code == 400
    status = status_pb2.Status.FromString(bad_pb.content)
    assert status.code == 3 and "malformed protobuf" in status.message
    bad_json = c.post("/v1/traces", content=b'{"resourceSpans": [', headers=JS)
    assert bad_json.status_code == 400
    assert bad_json.json()["message"].startswith("malformed JSON")
    bad_gzip = c.post("/v1/traces", content=b"not gzip", headers={**JS, "Content-Encoding": "gzip"})
    assert bad_gzip.status_code == 400 and "gzip" in bad_gzip.json()["message"]
    assert list_sink.batches == []


def test_415_unsupported_types(list_sink: ListSink) -> None:
    c = client(list_sink)
    text = c.post("/v1/traces", content=b"hi", headers={"Content-Type": "text/plain"})
    assert text.status_code == 415 and "text/plain" in text.json()["message"]
    brotli = c.post("/v1/traces", content=b"{}", headers={**JS, "Content-Encoding": "br"})
    assert brotli.status_code == 415


def test_503_when_backpressure_reports_seconds(list_sink: ListSink) -> None:
    wait: list[float | None] = [2.2]
    c = client(list_sink, backpressure=lambda: wait[0])
    body = protobuf_body(make_sdk_spans())
    busy = c.post("/v1/traces", content=body, headers=PB)
    assert busy.status_code == 503 and busy.headers["retry-after"] == "3"
    assert status_pb2.Status.FromString(busy.content).code == 14
    wait[0] = None
    assert c.post("/v1/traces", content=body, headers=PB).status_code == 200
    assert len(list_sink.batches) == 1


def test_503_when_sink_raises(list_sink: ListSink) -> None:
    def full(records: list[SpanRecord]) -> None:
        raise Backpressure(5)

    def broken(records: list[SpanRecord]) -> None:
        raise OSError("disk full")

    body = protobuf_body(make_sdk_spans())
    r1 = client(full).post("/v1/traces", content=body, headers=PB)
    assert r1.status_code == 503 and r1.headers["retry-after"] == "5"
    r3 = client(broken).post("/v1/traces", content=body, headers=PB)
    assert r3.status_code == 503 and r3.headers["retry-after"] == "1"
    assert "OSError" in status_pb2.Status.FromString(r3.content).message


def test_health_and_readiness(list_sink: ListSink) -> None:
    state = {"ready": False}
    c = client(list_sink, ready=lambda: state["ready"])
    assert c.get("/healthz").status_code == 200
    assert c.get("/readyz").status_code == 503
    state["ready"] = True
    assert c.get("/readyz").status_code == 200
    assert c.get("/metrics").status_code == 404  # not mounted unless given


def test_receiver_counters(list_sink: ListSink) -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    c = client(list_sink, telemetry=telemetry)
    c.post("/v1/traces", content=protobuf_body(make_sdk_spans()), headers=PB)
    c.post("/v1/traces", content=b"{", headers=JS)
    found = labelled_values(reader)
    assert found[names.RECEIVER_REQUESTS] == {
        (("code", "200"), ("encoding", "protobuf")): 1,
        (("code", "400"), ("encoding", "json")): 1,
    }
    assert found[names.RECEIVER_SPANS] == {(("encoding", "protobuf"),): 2}


# --- over a real uvicorn server on 127.0.0.1 ------------------------------------------------
@pytest.fixture
def server(list_sink: ListSink) -> Iterator[BackgroundServer]:
    app = create_receiver_app(sink=list_sink, bearer_token="tok", max_body_bytes=64 * 1024)
    with BackgroundServer(app) as running:
        yield running


def test_real_sdk_exporter_sends_to_the_receiver(
    server: BackgroundServer, list_sink: ListSink
) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    exporter = OTLPSpanExporter(
        endpoint=f"{server.url}/v1/traces",
        headers={"Authorization": "Bearer tok"},
        compression=Compression.Gzip,
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    with (
        tracer.start_as_current_span("invoke_agent shop"),
        tracer.start_as_current_span("chat model") as llm,
    ):
        llm.set_attribute("gen_ai.operation.name", "chat")
    assert provider.force_flush(10_000)
    provider.shutdown()
    expected = sorted(
        (span_to_record(s) for s in memory.get_finished_spans()), key=lambda r: r.span_id
    )
    assert sorted(list_sink.records, key=lambda r: r.span_id) == expected
    assert all(r.resource["service.name"] == "shop" for r in list_sink.records)


def test_413_while_streaming_a_body_without_length(
    server: BackgroundServer, list_sink: ListSink
) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):  # 100 x 4 KiB > the 64 KiB limit; no Content-Length is sent
            yield b" " * 4096

    response = httpx.post(
        f"{server.url}/v1/traces",
        content=chunks(),
        headers={**JS, "Authorization": "Bearer tok"},
        timeout=10,
    )
    assert response.status_code == 413
    assert "limit of 65536 bytes" in response.json()["message"]
    assert list_sink.batches == []


def test_real_server_auth_and_health(server: BackgroundServer) -> None:
    body = protobuf_body(make_sdk_spans())
    assert httpx.post(f"{server.url}/v1/traces", content=body, headers=PB).status_code == 401
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/readyz").status_code == 200


# --- fuzz through the app: never a 500 ---------------------------------------------------------
_FUZZ_CLIENT = TestClient(create_receiver_app(sink=lambda records: None))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.binary(max_size=256)
    | st.builds(lambda v: json.dumps(v).encode(), st.dictionaries(st.text(max_size=12), st.text())),
    content_type=st.sampled_from(["application/x-protobuf", "application/json"]),
    gzipped=st.booleans(),
)
def test_fuzz_app_answers_200_or_400(body: bytes, content_type: str, gzipped: bool) -> None:
    headers = {"Content-Type": content_type}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    response = _FUZZ_CLIENT.post("/v1/traces", content=body, headers=headers)
    assert response.status_code in (200, 400), response.text


def test_partial_success_drops_only_spans_with_invalid_ids(list_sink: ListSink) -> None:
    spans = make_sdk_spans()
    request = encode_spans(spans)
    request.resource_spans[0].scope_spans[0].spans.add(
        trace_id=b"\0" * 16, span_id=b"\1" * 8, name="bad"
    )
    c = client(list_sink)
    response = c.post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 1
    assert "invalid trace id" in answer.partial_success.error_message
    assert list_sink.records == [span_to_record(s) for s in spans]

    body = json.loads(json_body(spans))
    body["resourceSpans"][0]["scopeSpans"][0]["spans"].append(
        {"traceId": "01", "spanId": "0102030405060708", "name": "short"}
    )
    as_json = c.post("/v1/traces", content=json.dumps(body).encode(), headers=JS)
    assert as_json.status_code == 200
    assert as_json.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert len(list_sink.records) == 2 * len(spans)


def test_full_success_json_response_is_an_empty_object(list_sink: ListSink) -> None:
    response = client(list_sink).post("/v1/traces", content=json_body(make_sdk_spans()), headers=JS)
    assert response.json() == {}
