"""Against a real MLflow tracking server (pip, its own venv: tests/support/mlflow.py), the app's
traces and the worker's evaluation spans going in over OTLP with ``x-mlflow-experiment-id``
(issue 39 items 1 and 2):

* every scored result is exactly two native feedback assessments (the score, the label) from
  the judge on the MLflow trace the OTLP trace became, on the judged span, even with a worker
  killed after MLflow wrote an assessment but before it heard back, and a second one started;
* the app's service filter finds every judged trace (MLflow tags a trace with the resource of
  the last batch it got; the evaluation spans carry the judged span's service.name);
* the evaluation spans have MLflow's EVALUATOR span type, and the docs' MLflow query for
  failing faithfulness (docs/backends.md) lists exactly the traces with a failing verdict.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spanjudge._store import open_store
from spanjudge.testing import ScriptedJudgeServer
from tests.support.backend_docs import docs_query
from tests.support.hanging_proxy import HangingProxy
from tests.support.mlflow import MlflowServer
from tests.worker.conftest import base_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EVALUATIONS = 17  # the demo traffic under the three rules of base_config


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with MlflowServer.start(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


def wait_until(done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout} s: {what}")
        time.sleep(0.3)


def ours(info: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in info.get("assessments", []) if "spanjudge.evaluation.id" in a["metadata"]]


def test_every_result_is_one_assessment_pair_across_a_kill_and_the_service_stays_the_apps(
    mlflow: MlflowServer,
    tmp_path: Path,
    demo_request: Any,
    offline_judge: ScriptedJudgeServer,
    start_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    experiment = mlflow.create_experiment("support")
    header = {"x-mlflow-experiment-id": experiment}
    # the app sends its spans to MLflow and to the worker (as a Collector would fan out)
    sent = httpx.post(
        mlflow.url + "/v1/traces",
        content=demo_request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf", **header},
        timeout=30,
    )
    assert sent.status_code == 200, sent.text
    judged = {s.trace_id.hex() for rs in demo_request.resource_spans for ss in rs.scope_spans
              for s in ss.spans}  # fmt: skip
    assert len(mlflow.search(experiment, "tags.`service.name` = 'support-bot'")) == len(judged)
    # the worker's evaluation spans go into the same experiment (docs/backends.md, "MLflow")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-mlflow-experiment-id={experiment}")
    store_url = f"sqlite:///{tmp_path}/mlflow.db"
    config = {
        **base_config(offline_judge, store_url, mlflow.url),
        "outputs": ["span", "mlflow"],
        "lease_seconds": 1.0,
    }
    config["rules"][0]["params"] = {"threshold": 0.7}  # the demo's: its 0.5 answer fails
    with HangingProxy(mlflow.url) as proxy:
        # the first worker's writes reach MLflow, their answers never come back: killed then
        first = start_worker({**config, "mlflow_endpoint": proxy.url}, name="first")
        first.wait_ready()
        assert first.post(demo_request).status_code == 200
        store = open_store(store_url)
        try:
            wait_until(lambda: proxy.writes() >= 1, 60, "a first assessment written")
            first.kill()
        finally:
            store.close()
    written_before_the_kill = proxy.writes()
    second = start_worker({**config, "mlflow_endpoint": mlflow.url}, name="second")
    second.wait_ready()
    store = open_store(store_url)
    try:
        wait_until(
            lambda: len(store.results()) == EVALUATIONS
            and not store.unemitted_results(outputs=["span"]),  # span and sink: one mark
            120,
            "every result evaluated and delivered",
        )
        results = store.results()
    finally:
        store.close()
    assert second.terminate() == 0
    log = second.log()
    assert " ERROR " not in log and "refused" not in log, log

    scored = [r for r in results if r.status == "scored"]
    assert len(scored) == EVALUATIONS and written_before_the_kill >= 1
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for trace_id in {r.trace_id for r in scored}:
        assert trace_id is not None
        by_trace[trace_id] = ours(mlflow.trace_info(trace_id))
    # exactly two per result (score, label), nothing twice despite the re-delivery
    assert sum(len(found) for found in by_trace.values()) == 2 * len(scored)
    for record in scored:
        assert record.trace_id is not None
        mine = [
            a
            for a in by_trace[record.trace_id]
            if a["metadata"]["spanjudge.evaluation.id"] == record.evaluation_span_id
        ]
        values = {a["assessment_name"]: a["feedback"]["value"] for a in mine}
        assert values == {record.metric: record.score, f"{record.metric}.label": record.label}
        for assessment in mine:
            assert assessment["source"] == {
                "source_type": "LLM_JUDGE",
                "source_id": record.judge_model,
            }
            assert assessment.get("rationale") == record.reason
            if record.target_type in ("llm", "agent"):
                assert assessment["span_id"] == record.span_id

    # the app's own service still names every judged trace
    found = mlflow.search(experiment, "tags.`service.name` = 'support-bot'")
    assert {t["trace_id"] for t in found} == {f"tr-{t}" for t in judged}
    assert mlflow.search(experiment, "tags.`service.name` = 'spanjudge-worker'") == []
    # the evaluation spans are evaluator spans to MLflow, and name the worker that sent them
    trace_id = scored[0].trace_id
    assert trace_id is not None
    evaluations = [s for s in mlflow.spans(trace_id) if s["name"].startswith("evaluation ")]
    assert evaluations
    for span in evaluations:
        assert span["attributes"]["mlflow.spanType"] == '"EVALUATOR"'
    # the docs' query for failing faithfulness lists exactly the traces with such a verdict
    failing = {
        f"tr-{r.trace_id}" for r in scored if r.metric == "faithfulness" and r.label == "fail"
    }
    assert failing  # the demo traffic has planted faults
    listed = mlflow.search(experiment, docs_query("mlflow"))
    assert {t["trace_id"] for t in listed} == failing
