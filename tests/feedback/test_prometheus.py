"""The agreement gauges and the SpanjudgeJudgeAgreementLow alert in a real Prometheus that
scrapes a worker's ``/metrics`` while people post labels to its ``/v1/feedback``.

Bias (rule ``bias-agent``), five labels against the judge's verdicts (judge, person):
fail/pass, pass/fail x2, pass/pass x2. Both failed 0, judge only 1, person only 2, both passed 2:
accuracy 2/5 = 0.4; failing answers caught 0/2; passes passed 2/3; p_o = 0.4,
p_e = 0.2 * 0.4 + 0.8 * 0.6 = 0.56, kappa = (0.4 - 0.56) / 0.44 = -0.3636: under the 0.4 floor
with 5 >= 4 labels, so the alert goes pending. Faithfulness: two labels that agree (kappa 1),
fewer than 4: no alert.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge._receive.serving import BackgroundServer
from spanjudge.evaluators._review.explain import OfflineJudge
from spanjudge.settings import load_settings
from spanjudge.worker.service import Worker
from tests.deploy.prometheus_server import PrometheusServer
from tests.deploy.promql import RULE_FILES
from tests.feedback.conftest import scored

WAIT = 60.0


@pytest.fixture
def served(store_path: Path) -> Iterator[tuple[Worker, str]]:
    settings = load_settings(
        None,
        store_url=f"sqlite:///{store_path}",
        rules=[
            {"metric": "faithfulness", "target": "llm", "name": "faithfulness-llm"},
            {"metric": "bias", "target": "agent", "name": "bias-agent"},
        ],
        agreement_floor=0.4,
        agreement_min_labels=4,
    )
    worker = Worker(settings, judge=OfflineJudge(), span_exporter=InMemorySpanExporter(),
                    log_exporter=InMemoryLogRecordExporter())  # fmt: skip
    try:
        with BackgroundServer(worker.app) as server:
            yield worker, server.url
    finally:
        worker.emitter.shutdown(5)
        worker.meter_provider.shutdown()
        worker.store.close()


def post_labels(worker: Worker, url: str) -> None:
    def post(result: object, label: str) -> None:
        body = {"trace_id": result.trace_id, "span_id": result.span_id,  # type: ignore[attr-defined]
                "metric": result.metric, "rule": result.rule, "label": label}  # type: ignore[attr-defined]  # fmt: skip
        answer = httpx.post(f"{url}/v1/feedback", json=body, timeout=10)
        assert answer.status_code == 200, answer.text

    bias = scored(worker.store, rule="bias-agent")
    [bias_fail] = [r for r in bias if r.label == "fail"]
    passes = [r for r in bias if r.label == "pass"][:4]
    post(bias_fail, "pass")
    for result, label in zip(passes, ("fail", "fail", "pass", "pass"), strict=True):
        post(result, label)
    faith = scored(worker.store, rule="faithfulness-llm")
    post(next(r for r in faith if r.label == "fail"), "fail")
    post(next(r for r in faith if r.label == "pass"), "pass")


def test_agreement_gauges_and_alert_in_prometheus(
    served: tuple[Worker, str], tmp_path: Path
) -> None:
    worker, url = served
    post_labels(worker, url)
    with PrometheusServer.start(tmp_path, f"{url}/metrics", RULE_FILES) as prom:
        prom.wait_for_scrapes(2)

        def stats(rule: str) -> dict[str, float]:
            found = prom.query(f'spanjudge_judge_agreement{{rule="{rule}"}}')
            return {s["metric"]["stat"]: float(s["value"][1]) for s in found}

        bias = stats("bias-agent")
        assert bias == {
            "labels": 5.0,
            "accuracy": pytest.approx(0.4),
            "true_positive_rate": 0.0,
            "true_negative_rate": pytest.approx(2 / 3),
            "kappa": pytest.approx(-0.16 / 0.44),
            "floor": 0.4,
            "min_labels": 4.0,
        }
        faith = stats("faithfulness-llm")
        assert (faith["labels"], faith["kappa"], faith["accuracy"]) == (2.0, 1.0, 1.0)
        deadline = time.monotonic() + WAIT
        while True:
            alerts = [a for a in prom.api("alerts")["alerts"]
                      if a["labels"]["alertname"] == "SpanjudgeJudgeAgreementLow"]  # fmt: skip
            if alerts or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(a["labels"]["rule"], a["labels"]["metric"], a["state"]) for a in alerts] == [
            ("bias-agent", "bias", "pending")
        ]
        # {{ $value }}: how far kappa is under the floor
        assert float(alerts[0]["value"]) == pytest.approx(0.4 + 0.16 / 0.44)
