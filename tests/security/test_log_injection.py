"""Log injection (issue 30 item 6): text from a received span never forges a worker log line.

A ``service.name``, a scope name or an attribute key carrying a newline used to be formatted raw
into the planner's coverage warnings, so it wrote a second, made-up log line; a 1 MB service name
was written out in full once per warning. Here the spans go through the real OTLP receiver into a
SQLite store and the real planner logs what it cannot read.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from spanjudge._core.log_text import LIMIT, log_text
from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.rules import Rule

FORGED = "\n2026-01-01 12:00:00 ERROR spanjudge.worker forged line"
ARRIVED = 1_000.0
LATER = 2_000.0  # settled by then


def _otlp_body(service: str, scope: str, key: str) -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # an HTTP span no GenAI dialect reads (its shape is logged) and no LLM span (the rule's
    # miss is logged, with the service name)
    with provider.get_tracer(scope).start_as_current_span("GET /health" + FORGED) as span:
        span.set_attribute("http.method", "GET")
        span.set_attribute(key, "x")
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def _receive_and_plan(tmp_path: Path, body: bytes) -> None:
    store = SQLiteStore(str(tmp_path / "spans.db"))

    def sink(records: list[SpanRecord]) -> None:
        store.write_spans(records, now=ARRIVED)

    client = TestClient(create_receiver_app(sink=sink))
    response = client.post(
        "/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}
    )
    assert response.status_code == 200
    rules = [
        Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="llm", name=f"r{n}") for n in (1, 2, 3)
    ]
    planner = Planner({r.name: r for r in rules}, store, clock=lambda: LATER)
    planner.plan(TickReport(), now=LATER, settle_seconds=10, idle_seconds=10)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("spanjudge")]


def test_a_newline_in_service_scope_or_key_forges_no_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="spanjudge")
    body = _otlp_body("shop" + FORGED, "scope" + FORGED, "key" + FORGED)
    _receive_and_plan(tmp_path, body)

    messages = _messages(caplog)
    assert any("read by no GenAI dialect" in m for m in messages), messages
    assert sum(m.startswith("rule r") for m in messages) == 3, messages
    for message in messages:
        assert "\n" not in message, message
    escaped = log_text(FORGED)
    shape = next(m for m in messages if "read by no GenAI dialect" in m)
    # each untrusted piece is there, escaped, so the operator still sees what arrived
    for piece in ("shop", "scope", "key", "GET /health"):
        assert piece + escaped in shape, shape


def test_a_one_megabyte_service_name_is_logged_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="spanjudge")
    huge = "s" * 2**20
    _receive_and_plan(tmp_path, _otlp_body(huge, "scope", "key"))

    messages = _messages(caplog)
    assert len(messages) == 4, messages  # the span's shape and one miss per rule
    for message in messages:
        assert f"...(cut, {2**20} chars)" in message, message[:300]
    # four lines that used to carry the name in full (4 MiB) now stay short
    assert sum(len(m) for m in messages) < 4 * (LIMIT + 1_000)


def test_log_text_escapes_every_line_break_and_keeps_short_text() -> None:
    assert log_text("shop") == "shop"
    assert log_text("GET /health") == "GET /health"
    for brk in ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"):
        out = log_text(f"a{brk}b")
        assert out.isprintable() and out.startswith("a") and out.endswith("b"), repr(out)
        assert out.splitlines() == [out]
    assert log_text("a\\nb") == "a\\\\nb"  # a typed backslash-n is not an escaped newline
    assert log_text("\u202eevil") == "\\u202eevil"  # bidi override shown, not obeyed


def test_log_text_cuts_with_a_marker_and_the_original_length() -> None:
    cut = log_text("x" * 1_000, limit=10)
    assert cut == "x" * 10 + "...(cut, 1000 chars)"
    # escapes count toward the limit and are never split
    assert log_text("\x00" * 20, limit=10) == "\\x00\\x00...(cut, 20 chars)"
    assert log_text("y" * 10, limit=10) == "y" * 10
