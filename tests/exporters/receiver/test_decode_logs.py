"""decode_logs(): values map as for traces, and any input decodes or raises OtlpDecodeError."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from spanjudge._receive.decode import OtlpDecodeError
from spanjudge._receive.logs import decode_logs


# --- the decoder's guarantees -------------------------------------------------------------------
def test_values_map_like_traces_and_deep_nesting_is_refused() -> None:
    request = ExportLogsServiceRequest()
    record = (
        request.resource_logs.add()
        .scope_logs.add()
        .log_records.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, event_name="gen_ai.choice")
    )
    value = record.attributes.add(key="gen_ai.output.messages").value
    entry = value.array_value.values.add().kvlist_value.values.add(key="text")
    entry.value.bytes_value = "héllo".encode()
    [event] = decode_logs(request.SerializeToString(), "application/x-protobuf")
    assert event.attributes == {"gen_ai.output.messages": [{"text": "héllo"}]}
    assert event.span_id == "02" * 8 and event.body is None

    deep: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(80):  # deeper than the decoder reads: refused, whichever limit hits first
        deep = {"arrayValue": {"values": [deep]}}
    log = {"traceId": "01" * 16, "eventName": "gen_ai.choice", "body": deep}
    body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [log]}]}]}).encode()
    with pytest.raises(OtlpDecodeError):
        decode_logs(body, "application/json")
    with pytest.raises(OtlpDecodeError, match="unsupported content type"):
        decode_logs(b"", "text/plain")


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_KEYS = st.sampled_from(
    [
        *("scopeLogs", "logRecords", "traceId", "spanId", "eventName", "body", "attributes"),
        *("key", "value", "kvlistValue", "values"),
    ]
)
_JSON_BODIES = st.builds(
    lambda v: json.dumps({"resourceLogs": v}).encode(),
    st.recursive(
        st.none() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(_KEYS, c, max_size=3),
        max_leaves=20,
    ),
)


@FUZZ
@given(
    body=st.binary(max_size=512) | _JSON_BODIES,
    media=st.sampled_from(["application/x-protobuf", "application/json"]),
)
def test_fuzz_any_body_decodes_or_raises_the_decode_error(body: bytes, media: str) -> None:
    try:
        events = decode_logs(body, media)
    except OtlpDecodeError as exc:
        assert str(exc)
        return
    for event in events:
        assert len(event.trace_id) == 32 and event.event_name.startswith("gen_ai.")
