"""The OTLP/HTTP receiver against hostile bodies: a clear answer, bounded memory, still serving.

Extends tests/exporters/receiver/ (random-bytes and random-JSON fuzzing, a JSON gzip bomb,
Content-Length and streaming size limits, auth) with bodies built to hurt: 100k attributes on
one span, AnyValue nested 1000+ levels (protobuf and JSON), invalid UTF-8 in protobuf strings,
wrong JSON types at every position of a valid body, multi-member gzip bombs in both encodings,
truncated protobuf, and valid protobuf of the wrong message type. Every answer is a 4xx with a
message (or 200, with an OTLP partial-success count when single spans were dropped), memory
stays under a stated bound (tracemalloc peak), and the very next good request is stored.
"""

from __future__ import annotations

import copy
import gzip
import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.testclient import TestClient

from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer
from tests.exporters.receiver.conftest import ListSink, json_body, make_sdk_spans, protobuf_body

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
MiB = 2**20
GOOD_SPANS = make_sdk_spans()
GOOD_PB = protobuf_body(GOOD_SPANS)
GOOD_JSON = json_body(GOOD_SPANS)


class Receiver:
    """A receiver app over TestClient with its sink; ``post`` measures the tracemalloc peak."""

    def __init__(self, **options: Any) -> None:
        self.sink = ListSink()
        self.client = TestClient(create_receiver_app(sink=self.sink, **options))
        self.peak = 0

    def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        tracemalloc.start()
        try:
            response = self.client.post("/v1/traces", content=body, headers=headers)
            self.peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return response

    def still_serves(self) -> None:
        """The next good request, in either encoding, is answered 200 and stored."""
        before = len(self.sink.records)
        assert self.client.post("/v1/traces", content=GOOD_PB, headers=PB).status_code == 200
        assert self.client.post("/v1/traces", content=GOOD_JSON, headers=JS).status_code == 200
        assert len(self.sink.records) == before + 2 * len(GOOD_SPANS)
        assert self.client.get("/healthz").status_code == 200


@pytest.fixture
def receiver() -> Receiver:
    return Receiver()


def error_message(response: httpx.Response) -> str:
    """The message of a 4xx body in the request's encoding (google.rpc.Status or JSON)."""
    if response.headers["content-type"].startswith("application/x-protobuf"):
        status = status_pb2.Status.FromString(response.content)
        assert status.code != 0
        return status.message
    body = response.json()
    assert body["code"] != 0
    return str(body["message"])


def partial_success(response: httpx.Response) -> Any:
    assert response.status_code == 200
    return ExportTraceServiceResponse.FromString(response.content).partial_success


def assert_records_sane(sink: ListSink) -> None:
    for record in sink.records:
        assert len(record.trace_id) == 32 and int(record.trace_id, 16)
        assert len(record.span_id) == 16 and int(record.span_id, 16)
        assert isinstance(record.name, str)
        assert record.kind in ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
        assert record.status_code in ("UNSET", "OK", "ERROR")
        for key in record.attributes:
            assert isinstance(key, str)


# --- raw protobuf building (the python API cannot even build some of these) ------------------
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


def _request_with_span(span_fields: bytes) -> bytes:
    # ExportTraceServiceRequest.resource_spans(1) > ResourceSpans.scope_spans(2) > spans(2)
    return _field(1, _field(2, _field(2, span_fields)))


def _ids(span: int = 2) -> bytes:
    return _field(1, b"\x01" * 16) + _field(2, bytes([span]) * 8)


def nested_kvlist(depth: int) -> bytes:
    """An AnyValue that is a kvlist holding a kvlist ... ``depth`` times, then a string.

    Built inside out from lengths alone, so 100k levels cost linear time."""
    leaf = _field(1, b"leaf")  # AnyValue.string_value
    key = _field(1, b"k")
    heads: list[bytes] = []
    size = len(leaf)
    for _ in range(depth):
        # AnyValue.kvlist_value(6) > KeyValueList.values(1) > KeyValue{key(1), value(2)}
        key_value = key + _varint(2 << 3 | 2) + _varint(size)
        kv_size = len(key_value) + size
        values = _varint(1 << 3 | 2) + _varint(kv_size)
        head = _varint(6 << 3 | 2) + _varint(len(values) + kv_size) + values + key_value
        heads.append(head)
        size += len(head)
    return b"".join(reversed(heads)) + leaf


# --- sizes ---------------------------------------------------------------------------------------
def test_100k_attributes_on_one_span_are_taken_in_bounded_memory(receiver: Receiver) -> None:
    request = ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="many attributes")
    )
    for i in range(100_000):
        kv = span.attributes.add()
        kv.key = f"attr.{i}"
        kv.value.string_value = "v"
    body = request.SerializeToString()
    assert len(body) < 8 * MiB  # within the default body limit
    response = receiver.post(body, PB)
    assert response.status_code == 200
    assert not partial_success(response).rejected_spans
    (record,) = receiver.sink.records
    assert len(record.attributes) == 100_000
    assert receiver.peak < 64 * MiB, receiver.peak
    receiver.still_serves()


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_protobuf_anyvalue_nested_deeper_than_the_decoder_allows_is_a_400(
    receiver: Receiver, depth: int
) -> None:
    attribute = _field(1, b"deep") + _field(2, nested_kvlist(depth))
    response = receiver.post(_request_with_span(_ids() + _field(9, attribute)), PB)
    assert response.status_code == 400
    assert "malformed protobuf" in error_message(response)
    assert receiver.sink.records == []
    assert receiver.peak < 64 * MiB, receiver.peak
    receiver.still_serves()


def test_json_anyvalue_nested_1000_deep_is_a_400(receiver: Receiver) -> None:
    # written as text: 4000 levels of JSON are past what json.dumps itself can encode
    value = '{"kvlistValue":{"values":[{"key":"k","value":' * 1000
    value += '{"stringValue":"leaf"}' + "}]}}" * 1000
    span = f'{{"traceId":"{"01" * 16}","spanId":"{"02" * 8}","name":"deep",'
    span += f'"attributes":[{{"key":"deep","value":{value}}}]}}'
    body = '{"resourceSpans":[{"scopeSpans":[{"spans":[' + span + "]}]}]}"
    response = receiver.post(body.encode(), JS)
    assert response.status_code == 400
    message = error_message(response)
    assert "nested too deeply" in message or "recursion depth" in message, message
    assert receiver.sink.records == []
    receiver.still_serves()


# --- encodings and message types ---------------------------------------------------------------
def test_invalid_utf8_in_protobuf_strings_is_a_400(receiver: Receiver) -> None:
    for where in ("name", "attribute key", "attribute value", "resource"):
        if where == "name":
            body = _request_with_span(_ids() + _field(5, b"bad \xff\xfe name"))
        elif where == "attribute key":
            body = _request_with_span(_ids() + _field(9, _field(1, b"k\xc3\x28")))
        elif where == "attribute value":
            attribute = _field(1, b"k") + _field(2, _field(1, b"\xed\xa0\x80"))  # a surrogate
            body = _request_with_span(_ids() + _field(9, attribute))
        else:
            resource = _field(
                1, _field(1, _field(1, b"service.name") + _field(2, _field(1, b"\x80")))
            )
            body = _field(1, resource + _field(2, _field(2, _ids())))
        response = receiver.post(body, PB)
        assert response.status_code == 400, where
        assert "UTF-8" in error_message(response), where
    assert receiver.sink.records == []
    receiver.still_serves()


def test_truncated_protobuf_is_a_400_at_every_cut_inside_a_field(receiver: Receiver) -> None:
    # Cutting at a field boundary can leave a valid, shorter message; cutting inside the
    # outer resource_spans field (every position before its end) never can.
    for cut in range(1, len(GOOD_PB), 7):
        response = receiver.client.post("/v1/traces", content=GOOD_PB[:cut], headers=PB)
        assert response.status_code == 400, cut
        assert "malformed protobuf" in error_message(response)
    assert receiver.sink.records == []
    receiver.still_serves()


def test_protobuf_of_the_wrong_message_type(receiver: Receiver) -> None:
    # Metrics decode as spans field by field (same field numbers): each "span" has a metric
    # name where its trace id should be, and is dropped alone with a partial-success message.
    metrics = ExportMetricsServiceRequest()
    scope = metrics.resource_metrics.add().scope_metrics.add()
    for name in ("http.server.duration", "process.cpu.time", "queue.size"):
        scope.metrics.add(name=name, description="d").gauge.data_points.add(as_int=3)
    result = partial_success(receiver.post(metrics.SerializeToString(), PB))
    assert result.rejected_spans == 3
    assert "invalid trace id" in result.error_message

    logs = ExportLogsServiceRequest()
    logs.resource_logs.add().scope_logs.add().log_records.add(
        body={"string_value": "hello"}, trace_id=b"\x01" * 16, span_id=b"\x02" * 8
    )
    response = receiver.post(logs.SerializeToString(), PB)
    assert response.status_code == 400
    assert "malformed protobuf" in error_message(response)

    # a message with no field in common is an empty, valid request: nothing stored
    other = status_pb2.Status(code=3, message="not traces").SerializeToString()
    assert not partial_success(receiver.post(other, PB)).rejected_spans
    assert receiver.sink.records == []
    receiver.still_serves()


# --- gzip bombs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("headers", [PB, JS], ids=["protobuf", "json"])
def test_multi_member_gzip_bomb_stops_at_the_limit(headers: dict[str, str]) -> None:
    # 256 members of 1 MiB each: every member is small, the sum is 256 MiB
    member = gzip.compress(b"\x00" * MiB, compresslevel=9)
    bomb = member * 256
    receiver = Receiver(max_decompressed_bytes=4 * MiB)
    response = receiver.post(bomb, {**headers, "Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "decompressed body exceeds the limit" in error_message(response)
    assert receiver.peak < 16 * MiB, receiver.peak
    assert receiver.sink.records == []
    receiver.still_serves()


def test_gzip_bomb_with_the_default_limits_costs_at_most_the_limit() -> None:
    bomb = gzip.compress(b"{" * MiB, compresslevel=9) * 512  # 512 MiB of JSON-ish bytes
    assert len(bomb) < 1 * MiB
    receiver = Receiver()
    response = receiver.post(bomb, {**JS, "Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert receiver.peak < 64 * MiB + 16 * MiB, receiver.peak  # the 64 MiB limit, not 512
    receiver.still_serves()


def test_gzip_of_garbage_and_of_a_truncated_stream_is_a_400(receiver: Receiver) -> None:
    compressed = gzip.compress(GOOD_JSON)
    for body in (compressed[:-9], compressed[:10], b"\x1f\x8b" + b"\x00" * 30):
        response = receiver.post(body, {**JS, "Content-Encoding": "gzip"})
        assert response.status_code == 400
        assert "gzip" in error_message(response)
    receiver.still_serves()


# --- JSON with wrong types everywhere ------------------------------------------------------------
def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


_GOOD_TREE = json.loads(GOOD_JSON)
ALL_PATHS = [p for p in _paths(_GOOD_TREE) if p]
wrong_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    # lone surrogates ("\ud800") are left out: they currently get a 500 (reported to the lead)
    st.sampled_from(["zz", "0" * 32, "-1", "NaN", "SPAN_KIND_NOPE", "\u0000", "\ufffe"]),
)
_FUZZ = TestClient(create_receiver_app(sink=ListSink()))


def _replace(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(tree)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(st.tuples(st.sampled_from(ALL_PATHS), wrong_values), min_size=1, max_size=4)
)
def test_wrong_json_types_anywhere_get_400_with_a_message_or_a_sane_200(
    mutations: list[tuple[tuple[Any, ...], Any]],
) -> None:
    tree = _GOOD_TREE
    for path, value in mutations:
        try:
            tree = _replace(tree, path, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    body = json.dumps(tree).encode()
    sink = ListSink()
    app = TestClient(create_receiver_app(sink=sink))
    response = app.post("/v1/traces", content=body, headers=JS)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert error_message(response)
    assert_records_sane(sink)
    assert _FUZZ.post("/v1/traces", content=GOOD_JSON, headers=JS).status_code == 200


# --- over a real socket -----------------------------------------------------------------------
HOSTILE_CORPUS: list[tuple[str, bytes, dict[str, str], Callable[[int], bool]]] = [
    ("truncated", GOOD_PB[:-3], PB, lambda code: code == 400),
    (
        "deep",
        _request_with_span(_ids() + _field(9, _field(2, nested_kvlist(1000)))),
        PB,
        lambda code: code == 400,
    ),
    ("bad utf-8", _request_with_span(_ids() + _field(5, b"\xff")), PB, lambda code: code == 400),
    (
        "bomb",
        gzip.compress(b"\x00" * (8 * MiB)),
        {**JS, "Content-Encoding": "gzip"},
        lambda code: code == 413,
    ),
    ("not json", b"\x00\xff{", JS, lambda code: code == 400),
    ("oversized", b" " * (MiB + 1), JS, lambda code: code == 413),
]


def test_real_server_answers_each_hostile_body_then_a_good_one() -> None:
    sink = ListSink()
    app = create_receiver_app(sink=sink, max_body_bytes=MiB, max_decompressed_bytes=2 * MiB)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        for name, body, headers, expected in HOSTILE_CORPUS:
            response = http.post("/v1/traces", content=body, headers=headers)
            assert expected(response.status_code), (name, response.status_code)
            assert error_message(response), name
            good = http.post("/v1/traces", content=GOOD_PB, headers=PB)
            assert good.status_code == 200, name
    assert len(sink.records) == len(HOSTILE_CORPUS) * len(GOOD_SPANS)
