"""Decoding is bounded by what a request holds, not only by its bytes.

A 61 KB gzip body of empty ResourceSpans (30 MiB inflated) cost a worker about 2 GB and half a
minute, then got a 200: the decompressed-size limit bounds bytes, and an empty protobuf message
is 2 bytes on the wire but 45-175 in memory once parsed (an empty JSON object 2 bytes, 64 as a
dict). The receiver now counts first (messages, JSON values, spans or log records, the resource
repeated on each span) and answers 413 naming the limit, before it builds anything.

The worker tests run a real ``spanjudge worker`` and read its peak resident size
(``VmHWM``) from /proc: idle, then after one bomb and two at once. Before the fix, two bombs of
3 million empty ResourceSpans took it 400 MB over idle (2 million in JSON: 540 MB).
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from starlette.testclient import TestClient

from spanjudge._core.otlp_wire import count_messages
from spanjudge._receive.limits import TRACES, DecodeLimits
from spanjudge._receive.receiver import create_receiver_app
from tests.exporters.receiver.conftest import ListSink, json_body, make_sdk_spans, protobuf_body
from tests.support.ports import free_port
from tests.worker.conftest import WorkerProcess, start_worker  # noqa: F401 (a fixture)

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
GZIP = {"Content-Encoding": "gzip"}
MiB = 2**20
BUDGET = 300 * MiB  # the most a worker's peak may grow over its idle size under bombs


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _span_fields(number: int) -> bytes:
    return _field(1, b"\x01" * 16) + _field(2, number.to_bytes(8, "big"))


def _request(spans: list[bytes]) -> bytes:
    """ExportTraceServiceRequest > ResourceSpans > ScopeSpans > these Span messages."""
    return _field(1, _field(2, b"".join(_field(2, span) for span in spans)))


# --- a real worker -------------------------------------------------------------------------------
def _peak_bytes(worker: WorkerProcess) -> int:
    """The worker's peak resident size so far (Linux: VmHWM)."""
    with open(f"/proc/{worker.proc.pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def _worker(start: Callable[..., WorkerProcess], tmp_path: Path) -> WorkerProcess:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing is judged or sent in these tests
    worker = start(
        {
            "store_url": f"sqlite:///{tmp_path}/spans.db",
            "judge_model": "openai/scripted-judge",
            "judge_options": {"api_base": closed, "api_key": "x"},
            "downstream_endpoint": closed,
            "rules": [{"metric": "bias", "target": "agent"}],
        }
    )
    worker.wait_ready()
    return worker


def _post(worker: WorkerProcess, body: bytes, headers: dict[str, str]) -> httpx.Response:
    # a generous timeout: the unbounded decoder took a minute on two of these at once
    return httpx.post(worker.url + "/v1/traces", content=body, headers=headers, timeout=300)


def _at_once(worker: WorkerProcess, body: bytes, headers: dict[str, str]) -> list[int]:
    codes: list[int] = []
    threads = [
        threading.Thread(target=lambda: codes.append(_post(worker, body, headers).status_code))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


def _message(response: httpx.Response) -> str:
    if response.headers["content-type"].startswith("application/x-protobuf"):
        return status_pb2.Status.FromString(response.content).message
    return str(response.json()["message"])


def _empty_resources(media: str) -> bytes:
    """6 MB of empty ResourceSpans: 3 million in protobuf, 2 million in JSON."""
    if media == "protobuf":
        return b"\x0a\x00" * 3_000_000
    return b'{"resourceSpans":[' + b",".join([b"{}"] * 2_000_000) + b"]}"


@pytest.mark.parametrize("media", ["protobuf", "json"])
def test_a_worker_refuses_a_bomb_of_empty_resources_within_300_mb_of_idle(
    start_worker: Callable[..., WorkerProcess],  # noqa: F811
    tmp_path: Path,
    media: str,
) -> None:
    headers = PB if media == "protobuf" else JS
    inflated = _empty_resources(media)
    worker = _worker(start_worker, tmp_path)
    good = protobuf_body(make_sdk_spans())
    assert _post(worker, good, PB).status_code == 200
    bomb = gzip.compress(inflated, compresslevel=9)
    assert len(bomb) < 64 * 1024 < 5 * MiB < len(inflated)
    idle = _peak_bytes(worker)

    one = _post(worker, bomb, {**headers, **GZIP})
    after_one = _peak_bytes(worker)
    two = _at_once(worker, bomb, {**headers, **GZIP})
    after_two = _peak_bytes(worker)

    assert after_one - idle < BUDGET, f"one bomb: {(after_one - idle) // MiB} MiB over idle"
    assert after_two - idle < BUDGET, f"two bombs: {(after_two - idle) // MiB} MiB over idle"
    assert one.status_code == 413, one.text[:200]
    assert "more than 1000000" in _message(one) and "send smaller batches" in _message(one)
    assert two == [413, 413]
    assert _post(worker, good, PB).status_code == 200  # and it still serves


# --- each limit, on a receiver app with small ones -----------------------------------------------
SMALL = DecodeLimits(max_objects=1000, max_records=100, max_repeated_bytes=50_000)


def _client(limits: DecodeLimits = SMALL) -> tuple[TestClient, ListSink]:
    sink = ListSink()
    app = create_receiver_app(sink=sink, log_sink=lambda events: None, limits=limits)
    return TestClient(app), sink


def _refused(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 413, response.text
    message = _message(response)
    assert all(word in message for word in words), message


@pytest.mark.parametrize("count", [100, 101])
def test_spans_over_the_limit_are_refused_whole_and_at_the_limit_taken(count: int) -> None:
    client, sink = _client()
    body = _request([_span_fields(n) for n in range(1, count + 1)])

    response = client.post("/v1/traces", content=body, headers=PB)

    if count <= SMALL.max_records:
        assert response.status_code == 200
        assert len(sink.records) == count
    else:
        _refused(response, "more than 100 spans", "send smaller batches")
        assert sink.records == []


def test_empty_spans_over_the_limit_are_refused_before_each_is_rejected_alone() -> None:
    client, _ = _client()
    response = client.post("/v1/traces", content=_request([b""] * 5000), headers=PB)
    _refused(response, "more than 100 spans")


def test_json_spans_over_the_limit_are_refused() -> None:
    client, sink = _client()
    spans = [{"traceId": "01" * 16, "spanId": f"{n:016x}", "name": "s"} for n in range(1, 102)]
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    _refused(client.post("/v1/traces", content=body, headers=JS), "more than 100 spans")
    assert sink.records == []


@pytest.mark.parametrize("media", ["protobuf", "json"])
def test_log_records_over_the_limit_are_refused(media: str) -> None:
    client, _ = _client()
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    for _ in range(101):
        records.add(event_name="gen_ai.choice", trace_id=b"\x01" * 16)
    body = request.SerializeToString() if media == "protobuf" else _json(request)
    headers = PB if media == "protobuf" else JS
    _refused(client.post("/v1/logs", content=body, headers=headers), "more than 100 log records")


def _json(request: Message) -> bytes:
    return json.dumps(json_format.MessageToDict(request)).encode()


@pytest.mark.parametrize(
    "attribute",
    [
        _field(9, b""),  # Span.attributes: an empty KeyValue
        _field(11, b""),  # Span.events: an empty Event
    ],
    ids=["attributes", "events"],
)
def test_a_span_with_too_many_messages_inside_is_refused(attribute: bytes) -> None:
    client, _ = _client()
    span = _span_fields(1) + attribute * 2000
    _refused(client.post("/v1/traces", content=_request([span]), headers=PB), "messages")


def test_an_array_attribute_of_too_many_values_is_refused() -> None:
    client, _ = _client()
    array = _field(5, _field(1, b"") * 2000)  # AnyValue.array_value of 2000 empty values
    span = _span_fields(1) + _field(9, _field(1, b"k") + _field(2, array))
    _refused(client.post("/v1/traces", content=_request([span]), headers=PB), "messages")


def test_json_with_too_many_values_is_refused_before_it_is_loaded() -> None:
    client, _ = _client()
    body = b'{"resourceSpans":[' + b",".join([b"{}"] * 2000) + b"]}"
    _refused(client.post("/v1/traces", content=body, headers=JS), "more than 1000 JSON values")


def test_a_big_resource_on_many_spans_is_refused() -> None:
    client, _ = _client()
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="blob", value={"string_value": "x" * 1000})
    spans = resource_spans.scope_spans.add().spans
    for n in range(1, 61):  # 60 spans x 1 KB of resource: over 50,000 bytes
        spans.add(trace_id=b"\x01" * 16, span_id=n.to_bytes(8, "big"), name="s")
    response = client.post("/v1/traces", content=request.SerializeToString(), headers=PB)
    _refused(response, "resources and scope names", "50000")


@pytest.mark.parametrize("media", ["protobuf", "json"])
def test_separators_and_key_bytes_inside_strings_are_not_counted(media: str) -> None:
    # 20,000 bytes that look like message keys (protobuf) or value separators (JSON), inside
    # one attribute's string: over the cheap count, within the exact one
    client, sink = _client()
    request = ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="s")
    )
    span.attributes.add(key="text", value={"string_value": "\n*2JZjz[,:" * 2000})
    if media == "protobuf":
        response = client.post("/v1/traces", content=request.SerializeToString(), headers=PB)
    else:
        body = json.loads(_json(request))
        span_json = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        span_json.update(traceId="01" * 16, spanId="02" * 8)
        response = client.post("/v1/traces", content=json.dumps(body).encode(), headers=JS)
    assert response.status_code == 200, response.text
    assert len(sink.records) == 1


def test_a_body_malformed_where_the_count_reads_it_is_a_400() -> None:
    client, _ = _client()
    body = _request([_span_fields(n) for n in range(1, 150)])[:-5]  # the last span cut short
    response = client.post("/v1/traces", content=body, headers=PB)
    assert response.status_code == 400
    assert "malformed protobuf" in _message(response)


def test_the_default_limits_take_an_sdk_batch_in_either_encoding() -> None:
    client, sink = _client(DecodeLimits())
    spans = make_sdk_spans()
    assert client.post("/v1/traces", content=protobuf_body(spans), headers=PB).status_code == 200
    assert client.post("/v1/traces", content=json_body(spans), headers=JS).status_code == 200
    assert len(sink.records) == 2 * len(spans)


# --- the count agrees with the parser ------------------------------------------------------------
def _parsed_count(message: Message) -> tuple[int, int]:
    """(messages, spans) below ``message``, as the parser built them."""
    messages = spans = 0
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        children: list[Any] = list(value) if field.is_repeated else [value]
        for child in children:
            inner, inner_spans = _parsed_count(child)
            messages += 1 + inner
            spans += inner_spans + isinstance(child, Span)
    return messages, spans


def test_the_count_of_messages_and_spans_is_the_parser_s() -> None:
    request = ExportTraceServiceRequest.FromString(protobuf_body(make_sdk_spans()) * 3)
    rs = request.resource_spans.add()
    rs.resource.attributes.add(
        key="list", value={"array_value": {"values": [{}, {"int_value": 1}]}}
    )
    nested = {"kvlist_value": {"values": [{"key": "a", "value": {"bool_value": True}}]}}
    rs.scope_spans.add().spans.add(name="x").attributes.add(key="kv", value=nested)
    body = request.SerializeToString()

    messages, spans, fields = count_messages(
        body, TRACES.tree, max_messages=10**6, max_records=10**6, max_fields=10**7
    )

    assert (messages, spans) == _parsed_count(ExportTraceServiceRequest.FromString(body))
    assert fields > messages
