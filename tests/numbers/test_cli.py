"""``spanjudge scores --summary`` and ``spanjudge compare`` (issue 29) on the demo's store and on
PostgreSQL: intervals in the table and the JSON, segments by key, a planted regression between
two versions decided "worse", identical versions not."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store.models import JobSpec
from spanjudge._store.sql import SpanStore
from spanjudge.cli.app import cli
from tests.support.stores import POSTGRES_URL, drop_schema, open_postgres, schema_name

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def demo_store() -> Iterator[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/demo.db"
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        done = subprocess.run(
            [sys.executable, "-m", "spanjudge.cli", "demo", "--store", url],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        yield url


def test_summary_of_the_demo_store_has_intervals_per_rule(demo_store: str) -> None:
    done = run("scores", "--summary", "--json", "--store", demo_store)
    assert done.exit_code == 0, done.output
    rows = {row["rule"]: row for row in json.loads(done.output)}
    assert set(rows) == {
        "bias-agent",
        "faithfulness-llm",
        "topic_adherence-conversation",
        "tool_errors-agent",
        "task_completion-agent",
    }
    faith = rows["faithfulness-llm"]
    assert (faith["scored"], faith["verdicts"], faith["segment"]) == (8, 8, "all")
    # 7 of 8 passed: Wilson [0.529, 0.978], its upper bound widened to the Poisson one near 1
    # (one failure: 1 - Gamma(1)'s 2.5% quantile / 8 = 0.9968; Brown, Cai & DasGupta 2001)
    assert faith["pass_rate"]["value"] == pytest.approx(7 / 8)
    assert faith["pass_rate"]["low"] == pytest.approx(0.5291, abs=1e-4)
    assert faith["pass_rate"]["high"] == pytest.approx(0.9968, abs=1e-4)
    assert faith["mean_score"]["low"] < faith["mean_score"]["value"] < 1.0
    table = run("scores", "--summary", "--by", "model", "--store", demo_store).output
    assert "demo-scripted-llm" in table and "0.88 [0.53, 1.00]" in table


def test_summary_marks_the_segments_that_miss_their_rules_target(
    demo_store: str, tmp_path: Path
) -> None:
    # issue 40: a rule's target_half_width from the worker file; 8 verdicts cannot give +-0.05
    config = tmp_path / "worker.toml"
    config.write_text(
        '[[rules]]\nmetric = "faithfulness"\ntarget = "llm"\ntarget_half_width = 0.05\n'
    )
    done = run("scores", "--summary", "--json", "--config", str(config), "--store", demo_store)
    assert done.exit_code == 0, done.output
    rows = {row["rule"]: row for row in json.loads(done.output)}
    assert rows["faithfulness-llm"]["target_half_width"] == 0.05
    assert rows["faithfulness-llm"]["under_covered"] is True
    assert rows["bias-agent"]["under_covered"] is False  # no target: nothing to miss
    table = run("scores", "--summary", "--config", str(config), "--store", demo_store).output
    assert "±0.05 under-covered" in table and "under-covered: their interval is wider" in table


def test_summary_arguments_are_checked(demo_store: str) -> None:
    done = run("scores", "--by", "model", "--store", demo_store)
    assert done.exit_code == 2 and "--summary" in done.output
    done = run("scores", "--summary", "--cap", "0", "--store", demo_store)
    assert done.exit_code == 2 and "--cap" in done.output


def test_compare_on_the_demo_store_says_too_few(demo_store: str) -> None:
    done = run("compare", "--by", "service", "spanjudge-demo", "nope", "--store", demo_store)
    assert done.exit_code == 0, done.output
    assert "too few" in done.output
    done = run("compare", "--by", "service", "a", "b", "--store", demo_store)
    assert "no results with service = a or b" in done.output


def _versions(store: SpanStore, rates: dict[str, float], n: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    now = time.time()
    records = []
    for version, rate in rates.items():
        for i in range(n):
            passed = rng.random() < rate
            records.append(
                EvaluationRecord(
                    "faith",
                    "faithfulness",
                    "llm",
                    f"{version}-{i}",
                    f"{i:032x}",
                    f"{i:016x}",
                    score=0.9 if passed else 0.2,
                    label="pass" if passed else "fail",
                    success=passed,
                    sample_rate=0.5,
                    service_name="shop",
                    segments={"service": "shop", "service.version": version},
                )
            )
    store.enqueue_jobs(
        [JobSpec(r.rule, "llm", r.target_id, r.trace_id, r.span_id) for r in records], now=now
    )
    jobs = store.claim_jobs(owner="w", limit=len(records), lease_seconds=60, now=now)
    by_id = {r.target_id: r for r in records}
    for job in jobs:
        assert store.complete_job(job.job_id, owner="w", record=by_id[job.target_id], now=now)


@pytest.fixture
def postgres_store(tmp_path: Path) -> Iterator[tuple[SpanStore, str]]:
    """A PostgreSQL store and a worker settings file naming it (the CLI's --config)."""
    schema = schema_name()
    store = open_postgres(schema)
    config = tmp_path / "worker.toml"
    config.write_text(f'store_url = "{POSTGRES_URL}"\nstore_schema = "{schema}"\n', "utf-8")
    try:
        yield store, str(config)
    finally:
        store.close()
        drop_schema(schema)


def test_the_commands_on_postgresql(postgres_store: tuple[SpanStore, str]) -> None:
    store, config = postgres_store
    _versions(store, {"1.0": 0.92, "1.1": 0.75}, n=300)
    done = run("scores", "--summary", "--by", "service.version", "--json", "--config", config)
    assert done.exit_code == 0, done.output
    assert [row["segment"] for row in json.loads(done.output)] == ["1.0", "1.1"]
    done = run("compare", "--by", "service.version", "1.0", "1.1", "--json", "--config", config)
    assert done.exit_code == 0, done.output
    [row] = json.loads(done.output)
    assert (row["rule"], row["baseline"], row["candidate"]) == ("faith", "1.0", "1.1")
    assert row["pass_rate"]["decision"] == "worse"
    assert row["pass_rate"]["difference"]["high"] < 0
    table = run("compare", "--by", "service.version", "1.0", "1.1", "--config", config).output
    assert "worse" in table and "1.1 against 1.0" in table


def test_summary_and_compare_on_postgresql(postgres_store: tuple[SpanStore, str]) -> None:
    store, _config = postgres_store
    _versions(store, {"1.0": 0.92, "1.1": 0.75, "1.2": 0.92}, n=400)
    from spanjudge.cli.numbers import summary_of
    from spanjudge.evaluators._review.regressions import compare_segments

    rows = summary_of(store, by="service.version", since=None, rule=None, cap=10)
    assert [row.segment for row in rows] == ["1.0", "1.1", "1.2"]
    for row in rows:
        assert row.scored == 400 and row.effective_n == pytest.approx(400, rel=0.2)
        assert row.pass_rate.low is not None and row.pass_rate.low < row.pass_rate.value  # type: ignore[operator]
    sums = store.summary_sums(by="service.version")  # type: ignore[attr-defined]
    [worse] = compare_segments(sums, key="service.version", baseline="1.0", candidate="1.1")
    assert worse.pass_rate.decision == "worse" and worse.worse
    [same] = compare_segments(sums, key="service.version", baseline="1.0", candidate="1.2")
    assert same.pass_rate.decision == "no difference yet"
