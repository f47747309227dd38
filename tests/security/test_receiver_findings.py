"""Regression tests for what the security suite found (issue 8): each failed before its fix."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from spanjudge._receive.decode import OtlpDecodeError, decode_json
from spanjudge._receive.receiver import create_receiver_app

BODIES = [
    # an infinity where an enum or an integer belongs: protobuf raised OverflowError (a 500);
    # found by the hostile-JSON property test in issue 12's session
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": Infinity}]}]}]}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": -Infinity}]}]}]}',
    b'{"\\ud800": 1}',
    b'{"resourceSpans": "\\ud800"}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": "\\ud800"}]}]}]}',
]


@pytest.mark.parametrize("body", BODIES)
def test_hostile_json_values_get_a_400_not_a_500(body: bytes) -> None:
    client = TestClient(
        create_receiver_app(sink=lambda records: None), raise_server_exceptions=False
    )
    response = client.post("/v1/traces", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["message"]


@pytest.mark.parametrize("body", BODIES)
def test_decode_json_raises_only_otlp_decode_error(body: bytes) -> None:
    with pytest.raises(OtlpDecodeError):
        decode_json(body)
