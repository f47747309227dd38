"""POST /v1/logs: GenAI content events in, everything else counted and left out.

Records are made by the real SDK Logs API inside real spans, encoded by the OTLP exporter's own
encoder (or sent by the real ``OTLPLogExporter`` to the receiver on 127.0.0.1), and must arrive
as the :class:`LogEvent` the in-process log exporter builds from the same record.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from starlette.testclient import TestClient

from spanjudge._core import metric_names as names
from spanjudge._core.span_record import EvaluationRecord, LogEvent
from spanjudge._core.telemetry import Telemetry
from spanjudge._receive.http import Backpressure
from spanjudge._receive.logs import decode_logs
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer
from spanjudge.exporters._emit.evaluation_result import evaluation_event
from spanjudge.exporters._store_logs import log_to_event
from tests.exporters.receiver.conftest import ListSink
from tests.support.metrics import labelled_values

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
DETAILS = "gen_ai.client.inference.operation.details"
INPUT = [
    {"role": "system", "parts": [{"type": "text", "content": "Answer from the context."}]},
    {"role": "user", "parts": [{"type": "text", "content": "How long to return a blender?"}]},
]
OUTPUT = [
    {
        "role": "assistant",
        "parts": [{"type": "text", "content": "Within 30 days."}],
        "finish_reason": "stop",
    }
]


class LogSink:
    """Keeps every batch of events the receiver hands over (thread-safe)."""

    def __init__(self) -> None:
        self.batches: list[list[LogEvent]] = []
        self._lock = threading.Lock()

    def __call__(self, events: list[LogEvent]) -> None:
        with self._lock:
            self.batches.append(list(events))

    @property
    def events(self) -> list[LogEvent]:
        with self._lock:
            return [e for batch in self.batches for e in batch]


def emit_records(provider: LoggerProvider) -> dict[str, str]:
    """Emit, inside one chat span: the current content event (event_name field), an older
    per-message event (event.name attribute), an app log, our own evaluation result; and a
    content event outside any span. Returns the chat span's ids."""
    tracer = TracerProvider().get_tracer("app")
    logger = provider.get_logger("opentelemetry.instrumentation.openai_v2")
    with tracer.start_as_current_span("chat gpt-4o-mini") as span:
        logger.emit(
            event_name=DETAILS,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": INPUT,
                "gen_ai.output.messages": OUTPUT,
            },
        )
        logger.emit(
            attributes={"event.name": "gen_ai.user.message"},
            body={"content": "How long to return a blender?", "raw": b"\x00\xff"},
        )
        logger.emit(body="GET /healthz 200", attributes={"http.status_code": 200})
        ids = {
            "trace_id": format(span.get_span_context().trace_id, "032x"),
            "span_id": format(span.get_span_context().span_id, "016x"),
        }
    logger.emit(event_name=DETAILS, attributes={"gen_ai.operation.name": "chat"})
    return ids


def own_result(ids: dict[str, str]) -> ReadableLogRecord:
    record = EvaluationRecord(
        rule="faithfulness-llm",
        metric="faithfulness",
        target_type="llm",
        target_id=ids["span_id"],
        trace_id=ids["trace_id"],
        span_id=ids["span_id"],
        score=1.0,
        label="pass",
        success=True,
        finished_at=1.0,
    )
    return evaluation_event(record)


@pytest.fixture(scope="module")
def made() -> tuple[list[ReadableLogRecord], dict[str, str]]:
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    ids = emit_records(provider)
    records = list(memory.get_finished_logs())
    return [*records, own_result(ids)], ids


def expected(records: Sequence[ReadableLogRecord]) -> list[LogEvent]:
    names_ = [DETAILS, "gen_ai.user.message"]
    return [log_to_event(r, n) for r, n in zip(records[:2], names_, strict=True)]


def protobuf_body(records: Sequence[ReadableLogRecord]) -> bytes:
    return encode_logs(records).SerializeToString()


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in ("traceId", "spanId") else _hex_ids(v)
            for k, v in node.items()
        }
    return [_hex_ids(v) for v in node] if isinstance(node, list) else node


def json_body(records: Sequence[ReadableLogRecord]) -> bytes:
    """OTLP/JSON: protobuf JSON mapping with hex ids, int64 as strings."""
    return json.dumps(_hex_ids(json_format.MessageToDict(encode_logs(records)))).encode()


def client(sink: LogSink, **kwargs: Any) -> TestClient:
    return TestClient(create_receiver_app(sink=ListSink(), log_sink=sink, **kwargs))


# --- the real exporter over a real server on 127.0.0.1 ------------------------------------------
@pytest.fixture
def server() -> Iterator[tuple[BackgroundServer, LogSink, ListSink]]:
    logs, spans = LogSink(), ListSink()
    app = create_receiver_app(sink=spans, log_sink=logs, bearer_token="tok")
    with BackgroundServer(app) as running:
        yield running, logs, spans


def test_real_otlp_log_exporter_delivers_the_content_event_with_structured_messages(
    server: tuple[BackgroundServer, LogSink, ListSink],
) -> None:
    running, logs, spans = server
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "shop"}))
    exporter = OTLPLogExporter(
        endpoint=f"{running.url}/v1/logs",
        headers={"Authorization": "Bearer tok"},
        compression=Compression.Gzip,
    )
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    ids = emit_records(provider)
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert logs.events == expected(memory.get_finished_logs())
    details = logs.events[0]
    assert (details.trace_id, details.span_id) == (ids["trace_id"], ids["span_id"])
    assert details.event_name == DETAILS
    assert details.attributes["gen_ai.input.messages"] == INPUT
    assert details.attributes["gen_ai.output.messages"] == OUTPUT
    assert details.resource["service.name"] == "shop"
    assert details.scope_name == "opentelemetry.instrumentation.openai_v2"
    assert spans.records == []  # logs never reach the span sink


# --- encodings and answers ----------------------------------------------------------------------
def test_protobuf_keeps_only_genai_content_events(made: Any) -> None:
    records, _ = made
    sink = LogSink()
    response = client(sink).post("/v1/logs", content=protobuf_body(records), headers=PB)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    answer = ExportLogsServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")  # ignored records are not rejections
    assert sink.events == expected(records)
    older = sink.events[1]
    assert older.event_name == "gen_ai.user.message"  # from the event.name attribute
    assert older.body == {"content": "How long to return a blender?", "raw": "AP8="}
    assert all(e.event_name != "gen_ai.evaluation.result" for e in sink.events)


def test_json_body_gets_a_json_answer_and_the_same_events(made: Any) -> None:
    records, _ = made
    sink = LogSink()
    headers = {"Content-Type": "application/json; charset=utf-8"}
    response = client(sink).post("/v1/logs", content=json_body(records), headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {}
    assert sink.events == expected(records)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_gzip_bodies(made: Any, encoding: str) -> None:
    records, _ = made
    raw, headers = (
        (protobuf_body(records), PB) if encoding == "protobuf" else (json_body(records), JS)
    )
    sink = LogSink()
    response = client(sink).post(
        "/v1/logs", content=gzip.compress(raw), headers={**headers, "Content-Encoding": "gzip"}
    )
    assert response.status_code == 200
    assert sink.events == expected(records)


def test_a_batch_of_only_other_logs_is_accepted_and_stores_nothing(made: Any) -> None:
    records, _ = made
    sink = LogSink()
    response = client(sink).post("/v1/logs", content=protobuf_body(records[2:]), headers=PB)
    assert response.status_code == 200
    assert sink.batches == []  # the sink is not even called


def test_ignored_records_are_counted_by_reason(made: Any) -> None:
    records, _ = made
    ignored: Counter[str] = Counter()
    events = decode_logs(protobuf_body(records), "application/x-protobuf", ignored=ignored)
    assert len(events) == 2
    assert ignored == {"not_genai": 1, "no_trace_id": 1, "own_result": 1}


def test_malformed_bodies_get_400_with_a_status_message(made: Any) -> None:
    sink = LogSink()
    c = client(sink)
    bad_pb = c.post("/v1/logs", content=b"\x0a\xff\xff\xff\xff\x0f", headers=PB)
    assert bad_pb.status_code == 400
    status = status_pb2.Status.FromString(bad_pb.content)
    assert status.code == 3 and "malformed protobuf ExportLogsServiceRequest" in status.message
    for body, message in [
        (b"{not json", "malformed JSON"),
        (b'{"resourceLogs": 3}', "invalid OTLP/JSON"),
        (b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"zz"}]}]}]}', "not valid hex"),
    ]:
        response = c.post("/v1/logs", content=body, headers=JS)
        assert response.status_code == 400
        assert message in response.json()["message"]
    bad_gzip = c.post(
        "/v1/logs", content=b"\x1f\x8bnope", headers={**PB, "Content-Encoding": "gzip"}
    )
    assert bad_gzip.status_code == 400
    assert sink.batches == []


def test_content_event_with_an_invalid_id_is_rejected_alone(made: Any) -> None:
    records, _ = made
    request = encode_logs(records)
    bad = (
        request.resource_logs[0]
        .scope_logs[0]
        .log_records.add(trace_id=b"\x01" * 15, event_name=DETAILS)
    )
    assert bad.trace_id
    sink = LogSink()
    response = client(sink).post("/v1/logs", content=request.SerializeToString(), headers=PB)
    assert response.status_code == 200
    answer = ExportLogsServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_log_records == 1
    assert "invalid trace id" in answer.partial_success.error_message
    assert sink.events == expected(records)


def test_auth(made: Any) -> None:
    records, _ = made
    sink = LogSink()
    c = client(sink, bearer_token="s3cret")
    body = protobuf_body(records)
    assert c.post("/v1/logs", content=body, headers=PB).status_code == 401
    wrong = c.post("/v1/logs", content=body, headers={**PB, "Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"].startswith("Bearer")
    assert sink.batches == []
    ok = c.post("/v1/logs", content=body, headers={**PB, "Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and len(sink.events) == 2


def test_limits_and_media_types() -> None:
    sink = LogSink()
    c = client(sink, max_body_bytes=1024, max_decompressed_bytes=4096)
    big = c.post("/v1/logs", content=b"\0" * 2048, headers=PB)
    assert big.status_code == 413
    bomb = gzip.compress(b" " * 100_000)
    inflated = c.post("/v1/logs", content=bomb, headers={**JS, "Content-Encoding": "gzip"})
    assert inflated.status_code == 413
    assert "decompressed body exceeds" in inflated.json()["message"]
    text = c.post("/v1/logs", content=b"x", headers={"Content-Type": "text/plain"})
    assert text.status_code == 415
    brotli = c.post("/v1/logs", content=b"x", headers={**PB, "Content-Encoding": "br"})
    assert brotli.status_code == 415
    assert sink.batches == []


def test_503_on_backpressure_or_a_failing_sink(made: Any) -> None:
    body = protobuf_body(made[0])
    busy = client(LogSink(), backpressure=lambda: 2.5).post("/v1/logs", content=body, headers=PB)
    assert busy.status_code == 503 and busy.headers["retry-after"] == "3"

    def full(events: list[LogEvent]) -> None:
        raise Backpressure(4.0)

    def broken(events: list[LogEvent]) -> None:
        raise RuntimeError("disk full")

    app = create_receiver_app(sink=ListSink(), log_sink=full)
    refused = TestClient(app).post("/v1/logs", content=body, headers=PB)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "4"
    app = create_receiver_app(sink=ListSink(), log_sink=broken)
    failed = TestClient(app).post("/v1/logs", content=body, headers=PB)
    assert failed.status_code == 503
    assert (
        "could not store log records: RuntimeError"
        in status_pb2.Status.FromString(failed.content).message
    )


def test_without_a_log_sink_the_route_is_404(made: Any) -> None:
    app = create_receiver_app(sink=ListSink())
    response = TestClient(app).post("/v1/logs", content=protobuf_body(made[0]), headers=PB)
    assert response.status_code == 404


def test_log_requests_are_counted_but_not_as_spans(made: Any) -> None:
    reader = InMemoryMetricReader()
    c = client(LogSink(), telemetry=Telemetry(MeterProvider(metric_readers=[reader])))
    c.post("/v1/logs", content=protobuf_body(made[0]), headers=PB)
    c.post("/v1/logs", content=b"{", headers=JS)
    found = labelled_values(reader)
    assert found[names.RECEIVER_REQUESTS] == {
        (("code", "200"), ("encoding", "protobuf")): 1,
        (("code", "400"), ("encoding", "json")): 1,
    }
    assert not any(found.get(names.RECEIVER_SPANS, {}).values())
