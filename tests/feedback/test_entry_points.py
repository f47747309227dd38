"""The three ways in: ``spanjudge.feedback()``, ``POST /v1/feedback`` and ``spanjudge feedback``,
each with the inputs it must refuse (unknown metric, score out of range, unknown trace, oversized
note, bad ids, missing auth)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import spanjudge
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._store.sql import SpanStore
from spanjudge.cli.app import cli
from spanjudge.errors import FeedbackError
from spanjudge.human_feedback import (
    MAX_NOTE_CHARS,
    feedback_http_sink,
    parse_feedback,
    record_feedback,
)
from tests.feedback.conftest import scored

TOKEN = "s3cret"


@pytest.fixture
def target(store: SpanStore) -> dict[str, str]:
    """The demo's faithfulness failure (the refund answer that says 90 days)."""
    [failed] = [r for r in scored(store, metric="faithfulness") if r.label == "fail"]
    assert failed.trace_id and failed.span_id
    return {"trace_id": failed.trace_id, "span_id": failed.span_id}


# ------------------------------------------------------------------------------ Python
def test_python_feedback_on_a_span_is_stored_and_matched(
    store: SpanStore, target: dict[str, str]
) -> None:
    stored = spanjudge.feedback(
        target["trace_id"], target["span_id"], metric="faithfulness", label="fail",
        note="the refund window is 30 days", annotator="dana", score=0.1, store=store,
    )  # fmt: skip
    assert stored.feedback_id > 0 and stored.source == "python"
    [(result, label)] = store.labelled_results()
    assert (result.rule, result.label, label.label, label.note) == (
        "faithfulness-llm", "fail", "fail", "the refund window is 30 days"
    )  # fmt: skip


def test_python_feedback_opens_the_store_from_its_url(
    store_path: Path, target: dict[str, str]
) -> None:
    spanjudge.feedback(target["trace_id"], metric="bias", label="pass", store=str(store_path))
    with spanjudge.open_store(str(store_path)) as store:
        assert [(f.metric, f.span_id) for f in store.feedback()] == [("bias", None)]


def test_python_feedback_on_a_conversation_finds_its_trace(store: SpanStore) -> None:
    stored = spanjudge.feedback(
        conversation_id="demo-conversation-1", metric="topic_adherence", label="fail",
        store=store,
    )  # fmt: skip
    [conversation] = scored(store, metric="topic_adherence")
    assert stored.trace_id == conversation.trace_id  # the trace its event goes to
    [(result, _)] = store.labelled_results()
    assert result.target_id == "demo-conversation-1"


def test_the_function_stays_reachable_after_its_module_is_imported() -> None:
    import spanjudge.human_feedback as module

    assert callable(spanjudge.feedback) and spanjudge.feedback is module.feedback


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"metric": "faithfullness"},
            "unknown metric 'faithfullness'; known: argument_correctness, bias, faithfulness",
        ),
        ({"score": 1.5}, "score: Input should be less than or equal to 1"),
        ({"score": -0.1}, "score: Input should be greater than or equal to 0"),
        ({"score": float("nan")}, "score: Input should be a finite number"),
        ({"note": "x" * (MAX_NOTE_CHARS + 1)}, "note: String should have at most 4096"),
        ({"label": "maybe"}, "label: Input should be 'pass' or 'fail'"),
        ({"trace_id": "xyz"}, "trace_id: expected 32 hex characters"),
        ({"trace_id": "0" * 32}, "trace_id: expected 32 hex characters, not all zero"),
        ({"span_id": "abc"}, "span_id: expected 16 hex characters"),
        ({"trace_id": None}, "span_id needs its trace_id"),
    ],
)
def test_python_feedback_refuses_bad_input(
    store: SpanStore, target: dict[str, str], change: dict[str, Any], message: str
) -> None:
    given: dict[str, Any] = {**target, "metric": "faithfulness", "label": "fail", **change}
    with pytest.raises(FeedbackError, match=re.escape(message)) as caught:
        spanjudge.feedback(**given, store=store)
    assert caught.value.status == 400
    assert store.feedback() == []


def test_python_feedback_on_an_unknown_trace_or_span_is_refused(
    store: SpanStore, target: dict[str, str]
) -> None:
    with pytest.raises(FeedbackError, match=r"unknown target: trace f{32} is not in the store"):
        spanjudge.feedback("f" * 32, metric="bias", label="pass", store=store)
    with pytest.raises(FeedbackError, match=r"unknown target: span e{16} of trace") as caught:
        spanjudge.feedback(target["trace_id"], "e" * 16, metric="bias", label="pass", store=store)
    assert caught.value.status == 404
    with pytest.raises(FeedbackError, match="conversation 'nope'"):
        spanjudge.feedback(conversation_id="nope", metric="bias", label="pass", store=store)
    with pytest.raises(FeedbackError, match="give trace_id"):
        spanjudge.feedback(metric="bias", label="pass", store=store)
    assert store.feedback() == []


def test_a_metric_is_known_from_the_rules_or_from_stored_results(
    store: SpanStore, target: dict[str, str]
) -> None:
    item = parse_feedback({"trace_id": target["trace_id"], "metric": "politeness", "label": "pass"})
    with pytest.raises(FeedbackError, match="unknown metric 'politeness'"):
        record_feedback(store, item)
    assert record_feedback(store, item, metrics=["politeness"]).feedback_id > 0


# ------------------------------------------------------------------------------ HTTP
@pytest.fixture
def client(store: SpanStore) -> TestClient:
    app = create_receiver_app(
        sink=lambda spans: None,
        bearer_token=TOKEN,
        max_body_bytes=4096,
        max_decompressed_bytes=8192,
        feedback_sink=feedback_http_sink(store),
    )
    return TestClient(app)


def post(client: TestClient, body: Any, *, auth: str | None = f"Bearer {TOKEN}",
         **headers: str) -> Any:  # fmt: skip
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **headers}
    if auth is not None:
        sent["Authorization"] = auth
    return client.post("/v1/feedback", content=content, headers=sent)


def test_http_feedback_is_stored(
    client: TestClient, store: SpanStore, target: dict[str, str]
) -> None:
    answer = post(client, {**target, "metric": "faithfulness", "label": "fail", "note": "90?"})
    assert answer.status_code == 200, answer.text
    [stored] = store.feedback()
    assert answer.json() == {"feedback_id": stored.feedback_id, "trace_id": target["trace_id"]}
    assert (stored.source, stored.span_id, stored.note) == ("http", target["span_id"], "90?")
    zipped = gzip.compress(json.dumps({**target, "metric": "bias", "label": "pass"}).encode())
    assert post(client, zipped, **{"Content-Encoding": "gzip"}).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"metric": "nope"}, 400, "unknown metric 'nope'"),
        ({"score": 2}, 400, "score: Input should be less than or equal to 1"),
        ({"trace_id": "f" * 32, "span_id": None}, 404, "unknown target: trace ffff"),
        ({"note": "n" * 4097}, 400, "note: String should have at most 4096 characters"),
        ({"colour": "red"}, 400, "colour: unknown field"),
    ],
)
def test_http_feedback_refuses_bad_input(
    client: TestClient, store: SpanStore, target: dict[str, str], body: dict[str, Any],
    status: int, message: str,
) -> None:  # fmt: skip
    sent = {k: v for k, v in {**target, "metric": "faithfulness", "label": "fail", **body}.items()
            if v is not None}  # fmt: skip
    # a note of 4097 characters is within the 8 KiB test limits only when the body is gzipped
    answer = post(client, gzip.compress(json.dumps(sent).encode()), **{"Content-Encoding": "gzip"})
    assert answer.status_code == status
    assert message in answer.json()["message"]
    assert answer.json()["code"] == (3 if status == 400 else 5)  # INVALID_ARGUMENT, NOT_FOUND
    assert store.feedback() == []


def test_http_feedback_needs_the_bearer_token(client: TestClient, target: dict[str, str]) -> None:
    body = {**target, "metric": "bias", "label": "pass"}
    for auth in (None, "Bearer wrong", f"Basic {TOKEN}"):
        answer = post(client, body, auth=auth)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="spanjudge"'


def test_http_feedback_limits_and_media_types(client: TestClient, target: dict[str, str]) -> None:
    big = {**target, "metric": "bias", "label": "pass", "note": "n" * 4000, "annotator": "a" * 150}
    assert post(client, big).status_code == 413  # over max_body_bytes, before parsing
    bomb = gzip.compress(b"{" + b" " * 20_000 + b"}")
    assert post(client, bomb, **{"Content-Encoding": "gzip"}).status_code == 413
    assert post(client, b"{not json").status_code == 400
    assert "must be a JSON object" in post(client, [target]).json()["message"]
    wrong = post(client, b"{}", **{"Content-Type": "application/x-protobuf"})
    assert wrong.status_code == 415
    assert post(client, b"{}", **{"Content-Encoding": "br"}).status_code == 415


def test_http_feedback_answers_503_when_the_store_fails(
    client: TestClient, store: SpanStore, target: dict[str, str]
) -> None:
    store.close()
    answer = post(client, {**target, "metric": "bias", "label": "pass"})
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "1"
    assert "could not store feedback: StoreError" in answer.json()["message"]


def test_no_feedback_route_without_a_sink() -> None:
    app = create_receiver_app(sink=lambda spans: None)
    assert TestClient(app).post("/v1/feedback", json={}).status_code == 404


# ------------------------------------------------------------------------------ CLI
def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_cli_feedback(store_path: Path, target: dict[str, str]) -> None:
    done = run("feedback", target["trace_id"], "--metric", "faithfulness", "--label", "fail",
               "--note", "90 days is wrong", "--span", target["span_id"], "--annotator", "dana",
               "--store", str(store_path))  # fmt: skip
    assert done.exit_code == 0, done.output
    assert done.output.startswith("feedback 1: faithfulness fail on ")
    done = run("feedback", "--conversation", "demo-conversation-1", "--metric",
               "topic_adherence", "--label", "pass", "--store", str(store_path))  # fmt: skip
    assert done.exit_code == 0, done.output
    with spanjudge.open_store(str(store_path)) as store:
        rows = [(f.source, f.metric, f.label, f.annotator) for f in store.feedback()]
    assert rows == [
        ("cli", "faithfulness", "fail", "dana"),
        ("cli", "topic_adherence", "pass", None),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metric", "nope"], "error: unknown metric 'nope'"),
        (["--score", "1.01"], "error: invalid feedback: score: Input should be less than or equal"),
        (["--note", "x" * 5000], "error: invalid feedback: note: String should have at most 4096"),
        (["--trace", "f" * 32], "error: unknown target: trace ffff"),
    ],
)
def test_cli_feedback_refuses_bad_input(
    store_path: Path, target: dict[str, str], args: list[str], message: str
) -> None:
    given = {"--metric": "bias", "--trace": target["trace_id"]}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        given[flag] = value
    trace = given.pop("--trace")
    flat = [x for pair in given.items() for x in pair]
    done = run("feedback", trace, *flat, "--label", "fail", "--store", str(store_path))
    assert done.exit_code == 2
    assert message in done.output
    with spanjudge.open_store(str(store_path)) as store:
        assert store.feedback() == []


def test_cli_feedback_without_a_store_file(tmp_path: Path) -> None:
    done = run("feedback", "a" * 32, "--metric", "bias", "--label", "pass", "--store",
               str(tmp_path / "none.db"))  # fmt: skip
    assert done.exit_code == 2 and "no span store at" in done.output
    assert not (tmp_path / "none.db").exists()
