"""The OTLP decoder: SDK spans through protobuf and OTLP/JSON give the store exporter's records;
hostile input only ever raises OtlpDecodeError."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.decode import OtlpDecodeError, decode_json, decode_protobuf
from spanjudge._receive.http import Rejected, gunzip_limited
from spanjudge.exporters._convert import span_to_record
from tests.exporters.receiver.conftest import json_body, make_sdk_spans, protobuf_body


def test_protobuf_records_equal_store_exporter_records() -> None:
    spans = make_sdk_spans()
    assert decode_protobuf(protobuf_body(spans)) == [span_to_record(s) for s in spans]


def test_json_records_equal_store_exporter_records() -> None:
    spans = make_sdk_spans()
    assert decode_json(json_body(spans)) == [span_to_record(s) for s in spans]


def test_decoded_record_fields() -> None:
    records = {r.name: r for r in decode_protobuf(protobuf_body(make_sdk_spans()))}
    root, llm = records["invoke_agent support"], records["chat gpt-4o-mini"]
    assert root.parent_span_id is None and root.kind == "SERVER"
    assert llm.parent_span_id == root.span_id and llm.trace_id == root.trace_id
    assert len(llm.trace_id) == 32 and llm.trace_id == llm.trace_id.lower()
    assert llm.status_code == "ERROR" and llm.status_message == "rate limited"
    assert llm.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert llm.events[0].attributes == {"index": 0, "text": "héllo ✓"}
    assert llm.resource["service.name"] == "support-bot"
    assert llm.scope_name == "spanjudge"


HAND_WRITTEN = {
    "resourceSpans": [
        {
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
            "scopeSpans": [
                {
                    "scope": {"name": "my-lib"},
                    "spans": [
                        {
                            "traceId": "5B8EFFF798038103D269B633813FC60C",
                            "spanId": "EEE19B7EC3C1B174",
                            "parentSpanId": "EEE19B7EC3C1B173",
                            "name": "chat",
                            "kind": 3,
                            "startTimeUnixNano": "1544712660000000000",
                            "endTimeUnixNano": 1544712661000000000,
                            "attributes": [
                                {"key": "n", "value": {"intValue": "42"}},
                                {"key": "d", "value": {"doubleValue": 1.5}},
                                {"key": "b", "value": {"boolValue": True}},
                                {"key": "raw", "value": {"bytesValue": "aGk="}},
                                {
                                    "key": "arr",
                                    "value": {
                                        "arrayValue": {
                                            "values": [{"stringValue": "a"}, {"intValue": 2}]
                                        }
                                    },
                                },
                                {
                                    "key": "kv",
                                    "value": {
                                        "kvlistValue": {
                                            "values": [{"key": "x", "value": {"stringValue": "y"}}]
                                        }
                                    },
                                },
                            ],
                            "events": [
                                {
                                    "timeUnixNano": "1544712660500000000",
                                    "name": "e",
                                    "attributes": [],
                                }
                            ],
                            "status": {"code": "STATUS_CODE_OK"},
                        }
                    ],
                }
            ],
        }
    ]
}


def test_hand_written_otlp_json() -> None:
    [record] = decode_json(json.dumps(HAND_WRITTEN).encode())
    assert record.trace_id == "5b8efff798038103d269b633813fc60c"
    assert record.span_id == "eee19b7ec3c1b174"
    assert record.parent_span_id == "eee19b7ec3c1b173"
    assert record.kind == "CLIENT"
    assert record.start_time_unix_nano == 1544712660000000000
    assert record.end_time_unix_nano == 1544712661000000000
    assert record.status_code == "OK"
    assert record.attributes == {
        "n": 42,
        "d": 1.5,
        "b": True,
        "raw": "hi",
        "arr": ["a", 2],
        "kv": {"x": "y"},
    }
    assert record.events[0].time_unix_nano == 1544712660500000000
    assert record.scope_name == "my-lib"
    assert record.resource == {"service.name": "svc"}


def test_snake_case_field_names_and_enum_names() -> None:
    body = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": "5b8efff798038103d269b633813fc60c",
                                "span_id": "eee19b7ec3c1b174",
                                "name": "x",
                                "kind": "SPAN_KIND_PRODUCER",
                                "start_time_unix_nano": "5",
                            }
                        ]
                    }
                ]
            }
        ]
    }
    [record] = decode_json(json.dumps(body).encode())
    assert record.kind == "PRODUCER"
    assert record.end_time_unix_nano == 5  # missing end: the start, like the store exporter
    assert record.scope_name is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "malformed JSON"),
        (b"[1, 2]", "must be an object"),
        (b'{"resourceSpans": 3}', "invalid OTLP/JSON"),
        (
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"00"}]}]}]}',
            "traceId is not valid hex",
        ),
        (
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01","spanId":"02"}]}]}]}',
            "invalid trace id",
        ),
    ],
)
def test_malformed_json_messages(body: bytes, message: str) -> None:
    with pytest.raises(OtlpDecodeError, match=message):
        decode_json(body)


def test_malformed_protobuf_message() -> None:
    with pytest.raises(OtlpDecodeError, match="malformed protobuf"):
        decode_protobuf(b"\x0a\xff\xff\xff\xff\x0f")
    zero_ids = ExportTraceServiceRequest()
    zero_ids.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\0" * 16, span_id=b"1" * 8)
    with pytest.raises(OtlpDecodeError, match="invalid trace id"):
        decode_protobuf(zero_ids.SerializeToString())


def test_gzip_bomb_stops_at_the_limit_without_inflating() -> None:
    import gzip

    bomb = gzip.compress(b"\0" * (64 * 2**20), compresslevel=9)  # 64 MiB in ~64 KiB
    tracemalloc.start()
    try:
        with pytest.raises(Rejected) as info:
            gunzip_limited(bomb, 2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.status == 413
    assert peak < 8 * 2**20  # a few MiB at most, never the 64 MiB payload


def test_gzip_multi_member_and_truncated() -> None:
    import gzip

    assert gunzip_limited(gzip.compress(b"ab") + gzip.compress(b"cd"), 10) == b"abcd"
    with pytest.raises(Rejected) as info:
        gunzip_limited(gzip.compress(b"abcdef" * 100)[:-12], 10_000)
    assert info.value.status == 400


def _decodes_or_rejects(decode: Callable[[bytes], list[SpanRecord]], body: bytes) -> None:
    try:
        records = decode(body)
    except OtlpDecodeError as exc:
        assert str(exc)  # a message for the 400 body
        return
    for record in records:
        assert len(record.trace_id) == 32 and len(record.span_id) == 16
        assert record.kind in ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")


# --- fuzzing: any input is decoded or rejected with OtlpDecodeError, never another error --------
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=512))
def test_fuzz_protobuf_random_bytes(data: bytes) -> None:
    _decodes_or_rejects(decode_protobuf, data)


_ONE_SPAN_BODY = protobuf_body(make_sdk_spans()[:1])


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_protobuf_mutated_valid_body(noise: bytes) -> None:
    body = bytearray(_ONE_SPAN_BODY)
    for i, byte in enumerate(noise):
        body[(i * 7919 + byte) % len(body)] = byte
    _decodes_or_rejects(decode_protobuf, bytes(body))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "resourceSpans",
                    "scopeSpans",
                    "spans",
                    "traceId",
                    "spanId",
                    "parentSpanId",
                    "attributes",
                    "key",
                    "value",
                    "stringValue",
                    "intValue",
                    "arrayValue",
                    "kvlistValue",
                    "values",
                    "kind",
                    "status",
                    "code",
                    "events",
                    "name",
                    "startTimeUnixNano",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=4,
        )
    ),
    max_leaves=30,
)


@FUZZ
@given(json_values)
def test_fuzz_random_json(value: object) -> None:
    _decodes_or_rejects(decode_json, json.dumps(value).encode())


def test_deeply_nested_json_is_rejected_cleanly() -> None:
    deep = b'{"resourceSpans":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(OtlpDecodeError):
        decode_json(deep)
