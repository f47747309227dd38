"""``POST /v1/feedback`` answers a client can act on: a body it must not send again is a 4xx with
the matching ``google.rpc`` code, never a 503 that makes it retry forever."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.rpc import status_pb2
from starlette.testclient import TestClient

from spanjudge._receive.decode import JSON, PROTOBUF
from spanjudge._receive.http import status_body
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._store.sql import SpanStore
from spanjudge.human_feedback import feedback_http_sink
from tests.support.stores import sqlite_store

HEADERS = {"Content-Type": "application/json"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpanStore]:
    with sqlite_store(tmp_path / "feedback.db") as opened:
        yield opened


@pytest.fixture
def client(store: SpanStore) -> TestClient:
    # the receiver's default body limits: a deep body is small, the limits do not stop it
    app = create_receiver_app(sink=lambda spans: None, feedback_sink=feedback_http_sink(store))
    return TestClient(app)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"note": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001,
    ],
    ids=["array", "object"],
)
def test_json_nested_too_deeply_is_a_400_naming_it(
    client: TestClient, store: SpanStore, body: bytes
) -> None:
    answer = client.post("/v1/feedback", content=body, headers=HEADERS)
    assert answer.status_code == 400, answer.text
    assert "nested too deeply" in answer.json()["message"]
    assert answer.json()["code"] == 3  # INVALID_ARGUMENT
    assert store.feedback() == []


def test_an_unknown_target_is_a_404_with_grpc_not_found(client: TestClient) -> None:
    body = {"trace_id": "f" * 32, "metric": "faithfulness", "label": "fail"}
    answer = client.post("/v1/feedback", json=body)
    assert answer.status_code == 404, answer.text
    assert answer.json()["code"] == 5  # NOT_FOUND, not UNKNOWN (2)
    assert "unknown target" in answer.json()["message"]


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, 3), (401, 16), (403, 7), (404, 5), (405, 12), (413, 8), (415, 3), (429, 8), (500, 13),
     (501, 12), (503, 14), (504, 4)],
)  # fmt: skip
def test_status_bodies_carry_the_grpc_code_of_their_http_status(status: int, code: int) -> None:
    as_json = status_body(status, "why", JSON)
    assert (as_json.status_code, as_json.body) == (status, b'{"code":%d,"message":"why"}' % code)
    as_protobuf = status_pb2.Status.FromString(bytes(status_body(status, "why", PROTOBUF).body))
    assert (as_protobuf.code, as_protobuf.message) == (code, "why")


def test_with_annotator_tokens_the_token_names_the_annotator(seeded: Any) -> None:
    """Issue 41: 50 made-up annotator names from one token moved the agreement figures. With
    per-annotator tokens a label's annotator is its token's; another name, the shared bearer
    token or no token are refused."""
    from tests.feedback.conftest import LLM_SPAN, TRACE

    store = seeded.store
    sink = feedback_http_sink(store, annotator_tokens={"dana": "t-dana", "li": "t-li"})
    app = create_receiver_app(sink=lambda spans: None, bearer_token="shared", feedback_sink=sink)
    client = TestClient(app)
    body = {"trace_id": TRACE, "span_id": LLM_SPAN, "metric": "faithfulness", "label": "fail"}

    def post(token: str | None, **extra: str) -> Any:
        headers = dict(HEADERS, Authorization=f"Bearer {token}") if token else HEADERS
        return client.post("/v1/feedback", json={**body, **extra}, headers=headers)

    assert post("t-li").status_code == 200
    assert post("t-dana", annotator="dana").status_code == 200
    refused = post("t-dana", annotator="made-up-1")
    assert refused.status_code == 403 and "not the one this token" in refused.json()["message"]
    assert post("shared").status_code == 401  # the spans' token does not label
    assert post(None).status_code == 401
    assert post("t-nobody").status_code == 401
    assert sorted(f.annotator for f in store.feedback()) == ["dana", "li"]
