"""A worker whose rules sample by trace or conversation stores only what they can pick, and
evaluates exactly what it would have with everything stored: the same traffic goes through two
in-process workers (the real receiver, store, planner and judge path against the scripted
judge), one storing little, one storing everything, and their jobs and results are compared."""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.testclient import TestClient

from spanjudge._demo.app import RELEVANT_TOPICS
from spanjudge._receive.decode import PROTOBUF
from spanjudge.evaluators._plan.consistent import keeps
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker import keep_policy as keep_module
from spanjudge.worker.service import Worker
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink

SETTLE = 2.0
IDLE = 5.0


def copies(demo_request: Any, n: int, seed: int = 31) -> list[ExportTraceServiceRequest]:
    """``n`` copies of the demo traffic, each trace with a new random id and each
    conversation with an id of its own (``demo-conversation-1-<copy>``)."""
    rng = random.Random(seed)
    out = []
    for copy in range(n):
        request = ExportTraceServiceRequest()
        request.CopyFrom(demo_request)
        new_ids: dict[bytes, bytes] = {}
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    span.trace_id = new_ids.setdefault(
                        span.trace_id, rng.getrandbits(128).to_bytes(16, "big")
                    )
                    for kv in span.attributes:
                        if kv.key in attrs.CONVERSATION_ID_KEYS:
                            kv.value.string_value = f"{kv.value.string_value}-{copy}"
        out.append(request)
    return out


def naming_last(request: ExportTraceServiceRequest) -> list[ExportTraceServiceRequest]:
    """The request as two, the conversation named by the root spans alone (the demo's tracer
    puts it on every span; many libraries put it on the agent's root only), and the roots
    after all the other spans, as an SDK exports them (children end first)."""
    first, second = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    for rs in request.resource_spans:
        for part in (first, second):
            nrs = part.resource_spans.add()
            nrs.resource.CopyFrom(rs.resource)
        for ss in rs.scope_spans:
            scopes = [part.resource_spans[-1].scope_spans.add() for part in (first, second)]
            for scope in scopes:
                scope.scope.CopyFrom(ss.scope)
            for span in ss.spans:
                copied = scopes[0 if span.parent_span_id else 1].spans.add()
                copied.CopyFrom(span)
                if span.parent_span_id:
                    kept = [
                        kv for kv in span.attributes if kv.key not in attrs.CONVERSATION_ID_KEYS
                    ]
                    del copied.attributes[:]
                    copied.attributes.extend(kept)
    return [first, second]


def trace_ids(requests: list[ExportTraceServiceRequest]) -> set[str]:
    return {
        s.trace_id.hex()
        for r in requests
        for rs in r.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }


def ingest_metric(metrics: str, outcome: str) -> float:
    """spanjudge_ingest_spans_total{outcome=...} in a /metrics scrape."""
    pattern = rf'^spanjudge_ingest_spans_total{{[^}}]*outcome="{outcome}"[^}}]*}} (\S+)$'
    found = re.search(pattern, metrics, re.MULTILINE)
    assert found is not None, f"no {outcome} series in the scrape"
    return float(found.group(1))


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as backend:
        yield backend


def run(
    judge: ScriptedJudgeServer,
    sink: OtlpSink,
    db: Path,
    rules: list[dict[str, Any]],
    bodies: list[ExportTraceServiceRequest],
    *,
    store_everything: bool = False,
    monkeypatch: pytest.MonkeyPatch | None = None,
    restart_after: int | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Post ``bodies`` to an in-process worker, let every trace and conversation settle,
    evaluate; what it stored and decided, read back from its SQLite file. ``restart_after``:
    after that many bodies the worker is dropped unstopped (as SIGKILL leaves it) and a new
    one on the same store takes the rest."""
    config = {
        "store_url": f"sqlite:///{db}",
        "downstream_endpoint": sink.endpoint,
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": judge.base_url, "api_key": "x"},
        "settle_seconds": SETTLE,
        "idle_seconds": IDLE,
        "retention_seconds": None,
        "rules": rules,
        **settings,
    }
    clock = Clock()
    if store_everything:
        assert monkeypatch is not None
        with monkeypatch.context() as patch:  # the same rules, every span stored
            patch.setattr(keep_module.KeepPlan, "of", classmethod(lambda cls, rules: cls()))
            worker = Worker(load_settings(None, **config), clock=clock)
        assert worker.keep is None
    else:
        worker = Worker(load_settings(None, **config), clock=clock)
        assert worker.keep is not None

    def post(client: TestClient, bodies: list[ExportTraceServiceRequest]) -> None:
        for body in bodies:
            answer = client.post(
                "/v1/traces", content=body.SerializeToString(), headers={"Content-Type": PROTOBUF}
            )
            assert answer.status_code == 200, answer.text
            clock.advance(0.01)

    if restart_after is not None:
        with TestClient(worker.app) as client:
            post(client, bodies[:restart_after])
        bodies = bodies[restart_after:]
        worker = Worker(load_settings(None, **config), clock=clock)  # memory: gone
    try:
        with TestClient(worker.app) as client:
            post(client, bodies)
            metrics = client.get("/metrics").text
        for _ in range(3):
            clock.advance(IDLE + SETTLE + 1)
            worker.monitor.tick()
        with sqlite3.connect(db) as conn:
            spans = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
            per_trace = dict(
                conn.execute("SELECT trace_id, count(*) FROM spans GROUP BY trace_id").fetchall()
            )
            jobs = set(
                conn.execute(
                    "SELECT rule, target_type, target_id, trace_id, sample_rate, state FROM jobs"
                ).fetchall()
            )
        results = {
            (r.rule, r.target_id, r.status, r.score, r.label, r.reason)
            for r in worker.store.results(limit=100_000)
        }
        counts = dict(worker.keep.counts) if worker.keep is not None else {}
        return {
            "spans": spans,
            "traces": set(per_trace),
            "per_trace": per_trace,
            "jobs": jobs,
            "results": results,
            "counts": counts,
            "metrics": metrics,
        }
    finally:
        worker.shutdown(10)


@pytest.mark.parametrize("rate", [0.01, 0.1])
def test_trace_rules_store_only_sampled_traces_and_evaluate_the_same(
    rate: float,
    tmp_path: Path,
    demo_request: Any,
    offline_judge: ScriptedJudgeServer,
    sink: OtlpSink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traffic = copies(demo_request, 60 if rate < 0.05 else 12)
    ids = trace_ids(traffic)
    sampled = {t for t in ids if keeps(t, rate)}
    assert 0 < len(sampled) < len(ids)
    rules = [
        {"metric": "bias", "target": "agent", "sample_rate": rate, "sample_by": "trace"},
        {"metric": "faithfulness", "target": "llm", "sample_rate": rate, "sample_by": "trace"},
    ]
    little = run(offline_judge, sink, tmp_path / "little.db", rules, traffic)
    everything = run(
        offline_judge,
        sink,
        tmp_path / "all.db",
        rules,
        traffic,
        store_everything=True,
        monkeypatch=monkeypatch,
    )
    assert little["traces"] == sampled
    assert {t: everything["per_trace"][t] for t in sampled} == little["per_trace"]
    assert everything["traces"] == ids
    assert little["spans"] < everything["spans"]
    assert little["jobs"] and little["jobs"] == everything["jobs"]
    assert {job[3] for job in little["jobs"]} <= sampled
    assert little["results"] and little["results"] == everything["results"]
    passed = little["counts"]["not_sampled"]
    assert passed == everything["spans"] - little["spans"]
    assert ingest_metric(little["metrics"], "not_sampled") == passed


def conversation_rules(rate: float) -> list[dict[str, Any]]:
    return [
        {
            "metric": "topic_adherence",
            "target": "conversation",
            "name": "topics",
            "sample_rate": rate,
            "sample_by": "conversation",
            "params": {"relevant_topics": RELEVANT_TOPICS},
        },
        {"metric": "bias", "target": "agent", "sample_rate": rate, "sample_by": "conversation"},
        {
            "metric": "faithfulness",
            "target": "llm",
            "sample_rate": rate,
            "sample_by": "conversation",
        },
    ]


def test_conversation_rules_keep_whole_conversations_named_last(
    tmp_path: Path,
    demo_request: Any,
    offline_judge: ScriptedJudgeServer,
    sink: OtlpSink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each copy's turns arrive before the spans naming the conversation
    traffic = [part for copy in copies(demo_request, 8) for part in naming_last(copy)]
    rules = conversation_rules(0.5)
    little = run(offline_judge, sink, tmp_path / "little.db", rules, traffic)
    everything = run(
        offline_judge,
        sink,
        tmp_path / "all.db",
        rules,
        traffic,
        store_everything=True,
        monkeypatch=monkeypatch,
    )
    counts = little["counts"]
    assert counts["held"] > 0 and counts["released"] > 0 and counts["not_sampled"] > 0
    assert little["spans"] < everything["spans"]
    conversations = {job for job in little["jobs"] if job[1] == "conversation"}
    assert 0 < len(conversations) < 8  # some copies' conversations sampled, not all
    assert little["jobs"] == everything["jobs"]
    assert little["results"] and little["results"] == everything["results"]
    # a stored trace is whole: the turns held before its root named the conversation too
    assert {t: everything["per_trace"][t] for t in little["per_trace"]} == little["per_trace"]


def test_a_restart_between_held_turns_and_their_roots_loses_nothing(
    tmp_path: Path,
    demo_request: Any,
    offline_judge: ScriptedJudgeServer,
    sink: OtlpSink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every copy's turns answered 200 and held; the worker dies; the roots reach a new one
    parts = [naming_last(copy) for copy in copies(demo_request, 8)]
    traffic = [first for first, _ in parts] + [second for _, second in parts]
    rules = conversation_rules(0.5)
    restarted = run(
        offline_judge, sink, tmp_path / "restart.db", rules, traffic, restart_after=len(parts)
    )
    everything = run(
        offline_judge, sink, tmp_path / "all.db", rules, traffic, store_everything=True,
        monkeypatch=monkeypatch,
    )  # fmt: skip
    assert restarted["counts"]["released"] > 0
    assert restarted["jobs"] and restarted["jobs"] == everything["jobs"]
    assert restarted["results"] == everything["results"]
    assert {t: everything["per_trace"][t] for t in restarted["per_trace"]} == restarted["per_trace"]


def test_a_full_hold_buffer_is_counted_in_metrics(
    tmp_path: Path, demo_request: Any, offline_judge: ScriptedJudgeServer, sink: OtlpSink
) -> None:
    traffic = [part for copy in copies(demo_request, 3) for part in naming_last(copy)]
    little = run(
        offline_judge,
        sink,
        tmp_path / "small.db",
        conversation_rules(0.5),
        traffic,
        ingest_hold_max_spans=2,
    )
    assert little["counts"]["overflow"] > 0
    assert ingest_metric(little["metrics"], "overflow") == little["counts"]["overflow"]


def test_a_rule_sampling_by_target_beside_one_by_trace_stores_everything(
    tmp_path: Path, demo_request: Any, offline_judge: ScriptedJudgeServer, sink: OtlpSink
) -> None:
    traffic = copies(demo_request, 3)
    rules = [
        {"metric": "bias", "target": "agent", "sample_rate": 0.01, "sample_by": "trace"},
        {"metric": "faithfulness", "target": "llm", "sample_rate": 0.01},
    ]
    config = {
        "store_url": f"sqlite:///{tmp_path}/both.db",
        "downstream_endpoint": sink.endpoint,
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": offline_judge.base_url, "api_key": "x"},
        "retention_seconds": None,
        "rules": rules,
    }
    worker = Worker(load_settings(None, **config))
    try:
        assert worker.keep is None
        with TestClient(worker.app) as client:
            for body in traffic:
                response = client.post(
                    "/v1/traces",
                    content=body.SerializeToString(),
                    headers={"Content-Type": PROTOBUF},
                )
                assert response.status_code == 200
    finally:
        worker.shutdown(10)
    with sqlite3.connect(tmp_path / "both.db") as conn:
        stored = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
    sent = sum(len(ss.spans) for r in traffic for rs in r.resource_spans for ss in rs.scope_spans)
    assert stored == sent


def test_the_documented_config_stores_the_traces_its_rules_can_pick(
    tmp_path: Path, offline_judge: ScriptedJudgeServer, sink: OtlpSink
) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "worker.md").read_text()
    section = doc.split("## What the worker stores", 1)[1].split("\n## ", 1)[0]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "worker.toml"
    path.write_text(toml)
    settings = load_settings(
        path,
        store_url=f"sqlite:///{tmp_path}/doc.db",
        judge_model="openai/scripted-judge",
        judge_options={"api_base": offline_judge.base_url, "api_key": "x"},
        downstream_endpoint=sink.endpoint,
    )
    worker = Worker(settings)
    try:
        assert worker.keep is not None
        plan = worker.keep.plan
        assert (plan.everything, plan.trace_rate, plan.conversation_rate) == (False, 0.02, None)
        assert worker.keep.max_held_spans == 100_000 and worker.keep.hold_seconds == 60
    finally:
        worker.shutdown(10)


def test_enrich_mode_stores_and_forwards_everything_whatever_the_rules(
    tmp_path: Path, offline_judge: ScriptedJudgeServer, sink: OtlpSink
) -> None:
    config = {
        "store_url": f"sqlite:///{tmp_path}/enrich.db",
        "downstream_endpoint": sink.traces_url,
        "mode": "enrich",
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": offline_judge.base_url, "api_key": "x"},
        "rules": [{"metric": "bias", "target": "agent", "sample_rate": 0.01, "sample_by": "trace"}],
    }
    worker = Worker(load_settings(None, **config))
    try:
        assert worker.keep is None and worker.gate.keep is None
    finally:
        worker.shutdown(10)
