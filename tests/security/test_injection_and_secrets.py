"""Injection, secrets, redaction and receiver exposure.

(a) No SQL is built from user text: SQL payloads in span names, attribute keys and values,
    service names, conversation ids, rule names and filter values round-trip through both stores
    and through a Monitor rule, byte for byte (NUL in the text columns becomes U+FFFD, as
    ``spanjudge/_store/sql.py::_clean`` documents), and every table is intact afterwards.
(b) A judge API key never shows in logs (every logger at DEBUG), exceptions, stored results,
    the SQLite file, evaluation spans or the Prometheus exposition, whether the judge answers,
    refuses (401), fails (500) or is not there; the worker's startup log and configuration
    errors never show the key, the bearer token or the store password.
(c) The tracer's PII masking and redaction hook run before the span store and before the judge.
(d) The receiver compares bearer tokens with ``hmac.compare_digest``, binds 127.0.0.1 by default
    and applies its size limits in the worker.

Extends tests/evaluators/judges/test_judges.py (key absent from one judge error) and
tests/tracer/test_capture.py (redaction on the span attributes only).
"""

from __future__ import annotations

import gzip
import hmac
import json
import logging
import traceback
import uuid
from collections.abc import Iterator
from fnmatch import fnmatchcase
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from starlette.testclient import TestClient

from spanjudge._core.span_record import SpanRecord
from spanjudge._core.telemetry import Telemetry, prometheus_meter_provider
from spanjudge._demo.judge import start_offline_judge
from spanjudge._receive import receiver as receiver_module
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer, serve_receiver
from spanjudge._store import open_store
from spanjudge._store.sql import SpanStore
from spanjudge.errors import ConfigError, StoreError
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.settings import WorkerSettings, load_settings
from spanjudge.testing import Fault, ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import observe
from tests.evaluators.loop.conftest import App
from tests.evaluators.online.spans import Trace
from tests.exporters.receiver.conftest import ListSink, make_sdk_spans, protobuf_body
from tests.exporters.store.conftest import backend, store_factory  # noqa: F401
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink
from tests.support.ports import closed_port
from tests.support.stores import POSTGRES_URL, StoreFactory
from tests.worker.conftest import WorkerProcess

# ====================================================================== (a) injection
PAYLOADS = [
    "'; DROP TABLE spans; --",
    '" OR 1=1 --',
    "x' OR '1'='1",
    "\\'; DELETE FROM jobs WHERE 'a'='a",
    "back\\slash \\\\ \\x00 \\n",
    "percent %s %d %(name)s %% {}",
    "placeholders ? ?? $1 $$ :name @p",
    "unicode \u2018quotes\u2019 \u201cdouble\u201d \uff07fullwidth\uff07 \u02bc",
    "'||(SELECT sqlite_version())||'",
    "$tag$; DROP SCHEMA public CASCADE; $tag$",
    "multi\nline\r\ttab",
    "emoji \U0001f525 rtl \u202e end",
    "nul\x00byte",
]
# Texts a rule or a job row may carry. NUL is left out: jobs/results columns are not cleaned and
# PostgreSQL refuses NUL there (reported to the lead with a reproduction).
RULE_SAFE = [p for p in PAYLOADS if "\x00" not in p]


def _column(text: str) -> str:
    """What a text column gives back (spanjudge/_store/sql.py _clean: NUL -> U+FFFD)."""
    return text.replace("\x00", "\ufffd")


def _hostile_span(i: int, payload: str) -> SpanRecord:
    return SpanRecord(
        trace_id=f"{i + 1:032x}",
        span_id=f"{i + 1:016x}",
        name=payload,
        start_time_unix_nano=1_000 + i,
        end_time_unix_nano=2_000 + i,
        status_code="ERROR",
        status_message=payload,
        attributes={
            payload: payload,
            attrs.GEN_AI_CONVERSATION_ID: payload,
            "list": [payload, payload],
        },
        resource={"service.name": payload, payload: payload},
        scope_name=payload,
    )


def _table_counts(db: Any) -> dict[str, int]:
    counts = {}
    with db.transaction(write=False) as cur:
        for table in ("spans", "traces", "conversations", "jobs", "results", "outbox"):
            cur.execute(f"SELECT COUNT(*) FROM {table}")  # fixed names, no user text
            counts[table] = int(cur.fetchone()[0])
    return counts


def test_sql_payloads_round_trip_through_the_store(store_factory: StoreFactory) -> None:  # noqa: F811
    db = store_factory()
    spans = [_hostile_span(i, p) for i, p in enumerate(PAYLOADS)]
    db.write_spans(spans, now=100.0)
    for span in spans:
        (back,) = db.trace_spans(span.trace_id)
        payload = span.name
        assert back.name == _column(payload)
        assert back.status_message == _column(payload)
        assert back.scope_name == _column(payload)
        # JSON columns keep everything, NUL included
        assert back.attributes == span.attributes
        assert back.resource == span.resource
        assert back.service_name == payload and back.conversation_id == payload
    conversations = db.idle_conversations(idle_seconds=0, now=200.0)
    assert sorted(conversations) == sorted(_column(p) for p in PAYLOADS)
    for conversation_id in conversations:
        found = db.conversation_spans(conversation_id)
        assert [_column(s.conversation_id or "") for s in found] == [conversation_id]
    assert db.settled_traces(settle_seconds=0, now=200.0, limit=100) != []
    assert _table_counts(db) == {
        "spans": len(PAYLOADS),
        "traces": len(PAYLOADS),
        "conversations": len(PAYLOADS),
        "jobs": 0,
        "results": 0,
        "outbox": 0,
    }


@pytest.fixture(scope="module")
def module_judge() -> Iterator[ScriptedJudgeServer]:
    server = start_offline_judge()
    yield server
    server.stop()


def test_hostile_rule_names_and_filters_through_a_monitor(
    store_factory: StoreFactory,  # noqa: F811
    module_judge: ScriptedJudgeServer,
) -> None:
    db = store_factory()
    judge = module_judge.judge(max_retries=0)
    traces = {}
    for payload in RULE_SAFE:
        trace = Trace(service=payload)
        trace.agent(
            user="Is the blender refundable?",
            answer="Yes, within 30 days.",
            conversation_id=payload,
            **{payload: payload},
        )
        db.write_spans(trace.spans, now=100.0)
        traces[payload] = trace
    rules = [
        Rule(
            BiasMetric(model=judge),
            target="agent",
            name=payload,
            # the service as an exact glob, and the hostile attribute as key and value
            filter={"service": glob_escape(payload), "attributes": {payload: payload}},
        )
        for payload in RULE_SAFE
    ]
    assert all(fnmatchcase(p, glob_escape(p)) for p in RULE_SAFE)
    monitor = Monitor(
        rules, store=db, clock=lambda: 200.0, config=MonitorConfig(retention_seconds=None)
    )
    report = monitor.tick()
    assert report.jobs_enqueued == len(RULE_SAFE)
    assert report.scored == len(RULE_SAFE), report
    for payload in RULE_SAFE:
        (result,) = monitor.results(rule=payload)  # queryable by the hostile name
        assert result.rule == payload
        assert result.service_name == payload
        assert result.trace_id == traces[payload].trace_id
        assert result.status == "scored"
    assert monitor.results(rule="' OR 1=1 --") == []
    counts = _table_counts(db)
    assert counts["spans"] == counts["jobs"] == counts["results"] == len(RULE_SAFE)


# ====================================================================== (b) secrets
SECRET = "sk-test-SECRET-4c1e9a77d02b5f38"
SECRET_TAIL = "SECRET-4c1e9a77d02b5f38"  # a masked key may keep its first characters
PG_PASSWORD = "pg-PASSWORD-91bd7e"
BEARER = "bearer-TOKEN-5a0c33"


@pytest.fixture(
    params=[
        (case, transport)
        for case in ("scored", "unauthorized", "server_error", "refused")
        for transport in ("direct", "litellm")
    ],
    ids=lambda p: "-".join(p),
)
def judge_case(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, str | None]]:
    """(case, LiteLLMJudge with the secret key, expected error_type or None), over both of the
    judge's transports: its direct HTTP path and litellm."""
    case, transport = request.param
    options = {
        "api_key": SECRET,
        "max_retries": 0,
        "timeout": 10.0,
        "backoff_base": 0.01,
        "transport": transport,
    }
    if case == "scored":
        server = start_offline_judge()
        yield case, server.judge(**options), None
        server.stop()
        return
    if case == "refused":
        from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge

        judge = LiteLLMJudge(
            "openai/scripted-judge", api_base=f"http://127.0.0.1:{closed_port()}/v1", **options
        )
        yield case, judge, "judge_connection"
        return
    with ScriptedJudgeServer() as server:
        status = 401 if case == "unauthorized" else 500
        server.add_rule(Fault.status(status))
        expected = "judge_server_error" if status == 500 else None
        yield case, server.judge(**options), expected


def _texts_of_spans(spans: list[Any]) -> str:
    return json.dumps(
        [
            {"name": s.name, "attributes": s.attributes, "events": s.events, "resource": s.resource}
            for s in spans
        ],
        default=str,
    )


def test_judge_api_key_never_leaks(
    judge_case: tuple[str, Any, str | None],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    case, judge, expected_error = judge_case
    caplog.set_level(logging.DEBUG)
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "httpcore", "openai"):
        caplog.set_level(logging.DEBUG, logger=name)
    db = open_store(f"sqlite:///{tmp_path}/secrets.db")
    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    trace = Trace(service="shop")
    root = trace.agent(user="Is the blender refundable?", answer="Yes, within 30 days.")
    trace.llm(parent=root, user="Is the blender refundable?", answer="Yes, within 30 days.")
    trace.retriever(["Refunds are possible within 30 days."], parent=root)
    db.write_spans(trace.spans, now=100.0)
    with OtlpSink() as otlp:
        emitter = ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=otlp.traces_url))
        monitor = Monitor(
            [
                Rule(BiasMetric(model=judge), target="agent"),
                Rule(FaithfulnessMetric(model=judge), target="agent", name="faith"),
            ],
            store=db,
            emitter=emitter,
            telemetry=telemetry,
            clock=lambda: 200.0,
            config=MonitorConfig(retention_seconds=None, max_attempts=1),
        )
        report = monitor.tick()
        assert emitter.force_flush(10)
        emitted = otlp.wait_for(lambda s: len(s) >= 2)
        results = monitor.results()
        # the judge's own exception, as an app calling it directly would see it
        direct: list[str] = []
        if expected_error is not None or case == "unauthorized":
            from spanjudge.evaluators._judge.metrics.bias import Opinions

            try:
                judge.generate("hello", Opinions)
            except Exception as exc:
                direct += [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
            else:
                pytest.fail(f"{case}: the judge was expected to fail")
        monitor.close()
    exposition = generate_latest(registry).decode()
    db.close()

    # the scenario really ran: scores, or the expected kind of failure
    assert len(results) == 2
    if case == "scored":
        assert report.scored == 2 and all(r.status == "scored" for r in results)
    else:
        assert report.errors == 2 and all(r.status == "error" for r in results)
        if expected_error is not None:
            assert {r.error_type for r in results} == {expected_error}
        assert all(r.error_message for r in results)

    db_bytes = b"".join(p.read_bytes() for p in tmp_path.glob("secrets.db*"))
    out, err = capfd.readouterr()
    haystacks = {
        "logs": caplog.text
        + "".join(
            "".join(traceback.format_exception(*r.exc_info)) for r in caplog.records if r.exc_info
        ),
        "stdout/stderr": out + err,
        "results": repr(results) + json.dumps([r.error_message for r in results]),
        "exceptions": "".join(direct),
        "database file": db_bytes.decode("latin-1"),
        "evaluation spans": _texts_of_spans(emitted),
        "prometheus": exposition,
        "judge repr": repr(judge) + str(judge),
    }
    # positive controls: each place was really filled by this run
    assert "spanjudge_evaluations_total" in exposition
    assert "faith" in haystacks["database file"] and "faith" in haystacks["evaluation spans"]
    if judge.transport == "litellm":
        assert "scripted-judge" in haystacks["logs"]  # litellm's own DEBUG lines were captured
    else:  # the direct path's DEBUG line of each request (aiohttp logs none of its own)
        assert "judge request: POST http://127.0.0.1:" in haystacks["logs"]
    for where, text in haystacks.items():
        assert SECRET_TAIL not in text, f"{case}: the API key shows in the {where}"


def test_worker_log_and_config_errors_never_show_secrets(
    tmp_path: Path, module_judge: ScriptedJudgeServer
) -> None:
    schema = f"spanjudge_sec_{uuid.uuid4().hex[:10]}"
    user_url = POSTGRES_URL.replace(
        "postgresql://postgres@", f"postgresql://postgres:{PG_PASSWORD}@"
    )
    assert PG_PASSWORD in user_url  # trust auth on the test server: any password connects
    config = {
        "store_url": user_url,
        "store_schema": schema,
        "bearer_token": BEARER,
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": module_judge.base_url, "api_key": SECRET},
        "downstream_endpoint": f"http://127.0.0.1:{closed_port()}",
        "interval_seconds": 0.2,
        "rules": [{"metric": "bias", "target": "agent"}],
    }
    worker = WorkerProcess(config, tmp_path)
    try:
        worker.wait_ready()
        body = protobuf_body(make_sdk_spans())
        headers = {"Content-Type": "application/x-protobuf"}
        assert (
            httpx.post(worker.url + "/v1/traces", content=body, headers=headers).status_code == 401
        )
        assert worker.terminate() == 0
    finally:
        worker.kill()
        from spanjudge._store.postgres import PostgresStore

        PostgresStore(POSTGRES_URL, schema=schema).drop_schema()
    log = worker.log()
    assert "listening on http://127.0.0.1:" in log
    assert "postgres:***@" in log  # the store is named, its password masked
    for secret in (PG_PASSWORD, SECRET_TAIL, BEARER):
        assert secret not in log

    # configuration mistakes name the key, never the secret values next to them
    bad = {**config, "receiver_port": "not-a-port", "mode": SECRET}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert "receiver_port" in message and "mode" in message
    for secret in (PG_PASSWORD, SECRET_TAIL, BEARER):
        assert secret not in message
    result = CliRunner().invoke(
        __import__("spanjudge.cli.app", fromlist=["cli"]).cli, ["worker", "--config", str(path)]
    )
    assert result.exit_code != 0 and "receiver_port" in result.output
    for secret in (PG_PASSWORD, SECRET_TAIL, BEARER):
        assert secret not in result.output


def test_unreachable_postgres_error_hides_the_password() -> None:
    url = f"postgresql://postgres:{PG_PASSWORD}@127.0.0.1:{closed_port()}/test"
    with pytest.raises(StoreError) as info:
        open_store(url, timeout=1.0)
    text = str(info.value) + repr(info.value)
    assert "unreachable" in text
    assert PG_PASSWORD not in text


# ====================================================================== (c) redaction
EMAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"
INTERNAL = "ACME-INTERNAL-7731"
POLICY = "Refunds go to the card on file within 30 days."


@observe(kind="retriever", name="kb")
def _search(query: str) -> list[str]:
    return [f"{POLICY} Escalations: {EMAIL}, ref {INTERNAL}."]


@observe(kind="llm", model="app-model")
def _chat(messages: list[dict[str, str]]) -> str:
    return f"Your refund goes to card {CARD} within 30 days; questions to {EMAIL} ({INTERNAL})."


@observe(kind="agent", name="support")
def _support(question: str) -> str:
    docs = _search(question)
    return _chat([{"role": "user", "content": question + " " + " ".join(docs)}])


def test_pii_and_redaction_happen_before_the_store_and_the_judge(
    traced_app: App,
    store: SpanStore,
    clock: Clock,
    offline_judge: ScriptedJudgeServer,
    tmp_path: Path,
) -> None:
    capture.set_policy(pii=True, redact=lambda key, value: value.replace(INTERNAL, "[internal]"))
    try:
        _support(f"I am {EMAIL}, card {CARD}: where is my refund?")
    finally:
        capture.reset_policy()
    traced_app.flush()
    clock.advance(11)
    monitor = Monitor(
        [
            Rule(FaithfulnessMetric(model=offline_judge.judge()), target="llm"),
            Rule(BiasMetric(model=offline_judge.judge()), target="agent"),
        ],
        store=store,
        clock=clock,
        config=MonitorConfig(retention_seconds=None),
    )
    report = monitor.tick()
    assert report.scored == 2, report

    stored = b"".join(p.read_bytes() for p in tmp_path.glob("spans.db*")).decode("latin-1")
    sent = json.dumps([r.body for r in offline_judge.requests])
    assert offline_judge.requests
    for where, text in (("span store file", stored), ("judge requests", sent)):
        for raw in (EMAIL, CARD, INTERNAL):
            assert raw not in text, f"{raw!r} reached the {where}"
        assert "<email>" in text and "[internal]" in text, where
    assert "<card>" in stored and "<card>" in sent


# ====================================================================== (d) receiver exposure
def test_bearer_token_is_compared_with_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr(receiver_module.hmac, "compare_digest", spy)
    received = ListSink()
    client = TestClient(create_receiver_app(sink=received, bearer_token=BEARER))
    body = protobuf_body(make_sdk_spans())
    base = {"Content-Type": "application/x-protobuf"}
    same_length = BEARER[:-1] + ("x" if BEARER[-1] != "x" else "y")
    attempts = {
        "right": f"Bearer {BEARER}",
        "same length": f"Bearer {same_length}",
        "shorter": "Bearer b",
        "longer": f"Bearer {BEARER}{BEARER}",
        "wrong scheme": f"Basic {BEARER}",
        "missing": None,
    }
    codes = {}
    for name, header in attempts.items():
        headers = dict(base) if header is None else {**base, "Authorization": header}
        codes[name] = client.post("/v1/traces", content=body, headers=headers).status_code
    assert codes == {
        "right": 200,
        "same length": 401,
        "shorter": 401,
        "longer": 401,
        "wrong scheme": 401,
        "missing": 401,
    }
    # one constant-time comparison per request, even without a header or with another scheme
    assert len(calls) == len(attempts)
    assert all(expected == BEARER.encode() for _, expected in calls)
    assert len(received.records) == len(make_sdk_spans())


def test_default_bind_host_is_loopback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import inspect

    monkeypatch.delenv("SPANJUDGE_RECEIVER_HOST", raising=False)
    assert WorkerSettings().receiver_host == "127.0.0.1"
    assert load_settings().receiver_host == "127.0.0.1"
    assert inspect.signature(serve_receiver).parameters["host"].default == "127.0.0.1"
    assert BackgroundServer(create_receiver_app(sink=ListSink())).host == "127.0.0.1"

    seen: list[WorkerSettings] = []
    monkeypatch.setattr(
        "spanjudge.worker.service.run_worker", lambda settings: seen.append(settings) or 0
    )
    config = tmp_path / "worker.toml"
    config.write_text('[[rules]]\nmetric = "bias"\n', encoding="utf-8")
    from spanjudge.cli.app import cli

    result = CliRunner().invoke(cli, ["worker", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert [s.receiver_host for s in seen] == ["127.0.0.1"]


def test_worker_applies_its_size_limits_and_token(
    tmp_path: Path, module_judge: ScriptedJudgeServer
) -> None:
    from spanjudge.worker.service import Worker

    settings = load_settings(
        store_url=f"sqlite:///{tmp_path}/limits.db",
        bearer_token=BEARER,
        max_body_bytes=64 * 1024,
        max_decompressed_bytes=256 * 1024,
        rules=[{"metric": "bias", "target": "agent"}],
    )
    worker = Worker(settings, judge=module_judge.judge(), span_exporter=InMemorySpanExporter())
    try:
        client = TestClient(worker.app)
        auth = {"Authorization": f"Bearer {BEARER}", "Content-Type": "application/json"}
        big = client.post("/v1/traces", content=b" " * (64 * 1024 + 1), headers=auth)
        assert big.status_code == 413
        bomb = gzip.compress(b" " * (4 * 2**20))
        inflated = client.post(
            "/v1/traces", content=bomb, headers={**auth, "Content-Encoding": "gzip"}
        )
        assert inflated.status_code == 413
        assert "decompressed" in inflated.json()["message"]
        anonymous = client.post(
            "/v1/traces", content=b"{}", headers={"Content-Type": "application/json"}
        )
        assert anonymous.status_code == 401
        assert client.post("/v1/traces", content=b"{}", headers=auth).status_code == 200
    finally:
        worker.shutdown(5)
    defaults = WorkerSettings()
    assert (defaults.max_body_bytes, defaults.max_decompressed_bytes) == (8 * 2**20, 64 * 2**20)
