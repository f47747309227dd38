"""Fixtures for human feedback, agreement and export tests.

``demo_db``: a SQLite store that ``spanjudge demo`` filled once per session (its support-agent
traffic, 26 spans, and 17 results of the three metrics from the offline scripted judge, which is
deterministic text rules, not an LLM); each test gets its own copy (``store``, ``store_path``).
``seeded``: a store on SQLite or PostgreSQL with a small hand-built trace and conversation and
results written through the job queue, as the evaluation loop writes them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge._store import open_store
from spanjudge._store.models import JobSpec
from spanjudge._store.sql import SpanStore
from spanjudge.tracer import _attributes as attrs
from tests.support.stores import BACKENDS, schema_name, stores_on

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000.0


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    run = subprocess.run(
        [sys.executable, "-m", "spanjudge.cli", "demo", "--store", f"sqlite:///{path}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return path


@pytest.fixture
def store_path(demo_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store.db"
    shutil.copy(demo_db, copy)
    for suffix in ("-wal", "-shm"):
        extra = Path(f"{demo_db}{suffix}")
        if extra.exists():
            shutil.copy(extra, Path(f"{copy}{suffix}"))
    return copy


@pytest.fixture
def store(store_path: Path) -> Iterator[SpanStore]:
    opened = open_store(str(store_path))
    yield opened
    opened.close()


def scored(store: SpanStore, **query: str) -> list[EvaluationRecord]:
    return [r for r in store.results(**query) if r.status == "scored"]  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ seeded store
TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT_SPAN = "b7ad6b7169203331"
LLM_SPAN = "00f067aa0ba902b7"
TURN_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TURN_1 = "53995c3f42cd8ad8"
TURN_2 = "6e0c63257de34c92"
CONVERSATION = "conv-7"


@dataclass
class Seeded:
    store: SpanStore
    faith: EvaluationRecord  # rule faith on LLM_SPAN
    faith_strict: EvaluationRecord  # a second faithfulness rule on the same span
    bias: EvaluationRecord  # rule bias on the trace's root (agent) span
    topics: EvaluationRecord  # rule topics on CONVERSATION


def span(
    trace: str, span_id: str, start: int, parent: str | None = None, **extra: str
) -> SpanRecord:
    return SpanRecord(
        trace_id=trace,
        span_id=span_id,
        name="invoke_agent support" if parent is None else "chat gpt-4o-mini",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10,
        parent_span_id=parent,
        attributes={attrs.GEN_AI_OPERATION_NAME: "invoke_agent" if parent is None else "chat",
                    **extra},
        resource={"service.name": "shop"},
    )  # fmt: skip


def result(rule: str, metric: str, target_type: str, target_id: str, trace: str,
           span_id: str, label: str) -> EvaluationRecord:  # fmt: skip
    return EvaluationRecord(
        rule=rule, metric=metric, target_type=target_type, target_id=target_id,
        trace_id=trace, span_id=span_id, status="scored", label=label,
        score=1.0 if label == "pass" else 0.2, success=label == "pass", threshold=0.5,
        reason=f"{metric} says {label}", judge_model="scripted", finished_at=NOW,
    )  # fmt: skip


def complete(store: SpanStore, *records: EvaluationRecord) -> None:
    """Store results as the loop does: a job per (rule, target), claimed, then completed."""
    specs = [
        JobSpec(r.rule, r.target_type, r.target_id, r.trace_id, r.span_id,
                r.target_id if r.target_type == "conversation" else None)
        for r in records
    ]  # fmt: skip
    store.enqueue_jobs(specs, now=NOW)
    jobs = {j.rule + j.target_id: j for j in store.claim_jobs(
        owner="t", limit=100, lease_seconds=60, now=NOW)}  # fmt: skip
    for record in records:
        job = jobs[record.rule + record.target_id]
        assert store.complete_job(job.job_id, owner="t", record=record, now=NOW)


def seed(store: SpanStore) -> Seeded:
    conv = {attrs.GEN_AI_CONVERSATION_ID: CONVERSATION}
    store.write_spans(
        [
            span(TRACE, ROOT_SPAN, 100),
            span(TRACE, LLM_SPAN, 110, parent=ROOT_SPAN),
            span(TURN_TRACE, TURN_1, 200, **conv),
            span(TURN_TRACE, TURN_2, 300, **conv),
        ],
        now=NOW,
    )
    seeded = Seeded(
        store,
        faith=result("faith", "faithfulness", "llm", LLM_SPAN, TRACE, LLM_SPAN, "fail"),
        faith_strict=result("faith-strict", "faithfulness", "llm", LLM_SPAN, TRACE, LLM_SPAN,
                            "fail"),
        bias=result("bias", "bias", "agent", ROOT_SPAN, TRACE, ROOT_SPAN, "pass"),
        topics=result("topics", "topic_adherence", "conversation", CONVERSATION, TURN_TRACE,
                      TURN_2, "pass"),
    )  # fmt: skip
    complete(store, seeded.faith, seeded.faith_strict, seeded.bias, seeded.topics)
    return seeded


@pytest.fixture(params=BACKENDS)
def seeded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Seeded]:
    with stores_on(request.param, tmp_path / "seeded.db", schema_name("fb")) as make:
        yield seed(make())
