"""Fixtures for the deploy/ checks: a running ``spanjudge worker`` evaluating the demo traffic.

:func:`live_worker` starts the real worker process (SQLite store, OTLP/HTTP receiver, scores out
to an OTLP sink) with the offline scripted judge, and :func:`send_demo_traffic` runs the demo
app in a child process whose OTLP exporter points at the worker's receiver.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from spanjudge._demo.app import RELEVANT_TOPICS
from spanjudge._demo.judge import start_offline_judge
from spanjudge._store import open_store
from spanjudge._store.models import JobSpec
from spanjudge.testing import Fault, ScriptedJudgeServer
from tests.deploy.worker_rules import FAILING_JUDGE_URL_ENV
from tests.support.otlp_sink import OtlpSink
from tests.worker.conftest import ROOT, WorkerProcess

# Jobs of a rule no process of this test runs (say, one only an older worker version had).
# Monitor._run_job releases a job whose rule it does not know back to pending for "a process
# that has it", so these jobs stay open for as long as the test runs.
FOREIGN_RULE = "retired-rule-of-another-worker"
OLD_JOB_AGE = 900.0  # seconds; the backlog alert looks for an oldest age above 600
WAIT = 60.0  # bound on waiting for the worker; a healthy run needs a few seconds

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics_url: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by (sample name, labels)."""
    text = httpx.get(metrics_url, timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= lbl)


def foreign_jobs(store_url: str, count: int, *, created_at: float) -> None:
    """Enqueue ``count`` jobs for :data:`FOREIGN_RULE` (new target ids each time)."""
    store = open_store(store_url)
    try:
        first = int(created_at * 1000)
        store.enqueue_jobs(
            [
                JobSpec(FOREIGN_RULE, "trace", f"{first + i:032x}", f"{first + i:032x}", None)
                for i in range(count)
            ],
            now=created_at,
        )
    finally:
        store.close()


@dataclass
class LiveWorker:
    """The running worker and what the test knows about its traffic."""

    process: WorkerProcess
    store_url: str
    sink: OtlpSink
    judge: ScriptedJudgeServer
    failing_judge: ScriptedJudgeServer
    foreign: int = 0  # foreign-rule jobs in the store

    @property
    def metrics_url(self) -> str:
        return self.process.url + "/metrics"

    def add_foreign_jobs(self, count: int) -> None:
        foreign_jobs(self.store_url, count, created_at=time.time())
        self.foreign += count

    def label_against_the_judge(self, rule: str) -> int:
        """Post a person's label on every scored result of ``rule``, each the opposite of the
        judge's verdict (``POST /v1/feedback``), so agreement is low. Returns how many."""
        with open_store(self.store_url) as store:
            results = [r for r in store.results(rule=rule) if r.status == "scored"]
        for result in results:
            body = {"metric": result.metric, "rule": rule, "annotator": "deploy-test"}
            if result.target_type == "conversation":
                body["conversation_id"] = result.target_id
            else:
                body |= {"trace_id": result.trace_id, "span_id": result.span_id}
            body["label"] = "pass" if result.label == "fail" else "fail"
            answer = httpx.post(self.process.url + "/v1/feedback", json=body, timeout=10)
            assert answer.status_code == 200, answer.text
        return len(results)

    def wait_idle(self, min_evaluations: float) -> Samples:
        """Block until every received trace and conversation is planned, every job of the
        worker's own rules is finished, and at least ``min_evaluations`` were counted."""
        deadline = time.monotonic() + WAIT
        while True:
            samples = scrape(self.metrics_url)
            backlog = {
                state: total(samples, "spanjudge_backlog", state=state)
                for state in ("pending", "leased", "unplanned_traces", "unplanned_conversations")
            }
            done = total(samples, "spanjudge_evaluations_total")
            if (
                backlog["pending"] + backlog["leased"] == self.foreign
                and backlog["unplanned_traces"] == backlog["unplanned_conversations"] == 0
                and done >= min_evaluations
            ):
                return samples
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"worker not idle: backlog {backlog}, {done} evaluations\n{self.process.log()}"
                )
            time.sleep(0.2)


def send_demo_traffic(worker_url: str, conversation_id: str, version: str = "1.0.0") -> None:
    """Run the demo app (single questions + the four-turn conversation, here under
    ``conversation_id``) in a child process, traced by spanjudge with its OTLP/HTTP exporter
    pointed at the worker's receiver, as ``service.version`` ``version`` (the worker compares
    versions: its regression gauges need two)."""
    code = (
        "import sys, spanjudge\n"
        "from spanjudge._demo import app as demo_app\n"
        "demo_app.CONVERSATION_ID = sys.argv[2]\n"
        "tracing = spanjudge.configure(service_name='support-bot', otlp_endpoint=sys.argv[1])\n"
        "demo_app.run_traffic()\n"
        "assert tracing.force_flush(), 'spans not exported'\n"
        "tracing.shutdown()\n"
    )
    env = {**os.environ, "OTEL_RESOURCE_ATTRIBUTES": f"service.version={version}"}
    subprocess.run(
        [sys.executable, "-c", code, worker_url, conversation_id],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=WAIT,
        capture_output=True,
    )


def worker_config(store_url: str, judge: ScriptedJudgeServer, sink: OtlpSink) -> dict[str, Any]:
    """The demo's rules on a judge model litellm has a price for, plus rules that skip."""
    return {
        "store_url": store_url,
        "downstream_endpoint": sink.endpoint,
        # a model in litellm's price table, served by the scripted server: cost is counted
        "judge_model": "openai/gpt-4o-mini",
        "judge_options": {"api_base": judge.base_url, "api_key": "sk-scripted-not-a-real-key"},
        "interval_seconds": 0.5,
        "settle_seconds": 0.3,
        "idle_seconds": 0.5,
        "retention_seconds": None,
        "max_attempts": 1,
        # the live test labels a handful of results: the agreement alert may judge them
        "agreement_min_labels": 3,
        # the live test sends two versions: the newer is compared with the older continuously
        "regression_baseline": {"key": "service.version", "value": "previous"},
        "interval_refresh_seconds": 1,
        "rules": [
            # the thresholds of `spanjudge demo`
            {
                "metric": "faithfulness",
                "target": "llm",
                "name": "faith",
                "params": {"threshold": 0.7},
            },
            {"metric": "bias", "target": "agent", "name": "bias", "params": {"threshold": 0.5}},
            {
                "metric": "topic_adherence",
                "target": "conversation",
                "name": "topics",
                "params": {"relevant_topics": RELEVANT_TOPICS, "threshold": 0.8},
            },
            # skips: a sampled rule and one whose filter matches no demo conversation
            {"metric": "bias", "target": "agent", "name": "bias-sampled", "sample_rate": 0.5},
            # (the monitor counts `filtered` for conversations; a span filter just finds no
            # target)
            {
                "metric": "topic_adherence",
                "target": "conversation",
                "name": "topics-other-bot",
                "params": {"relevant_topics": RELEVANT_TOPICS},
                "filter": {"service": "another-bot"},
            },
        ],
        # one more faithfulness rule, judged by a server that answers every call with an error
        "rules_entrypoint": "tests.deploy.worker_rules:failing_judge_rules",
    }


@pytest.fixture(scope="module")
def live_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWorker]:
    """A ``spanjudge worker`` process, ready, with one job in its store that is
    :data:`OLD_JOB_AGE` seconds old and stays open (its rule belongs to no running worker)."""
    tmp = tmp_path_factory.mktemp("worker")
    store_url = f"sqlite:///{Path(tmp) / 'spans.db'}"
    foreign_jobs(store_url, 1, created_at=time.time() - OLD_JOB_AGE)
    judge = start_offline_judge()
    failing = ScriptedJudgeServer().add_rule(Fault.status(400)).start()
    with OtlpSink() as sink, pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAILING_JUDGE_URL_ENV, failing.base_url)
        process = WorkerProcess(worker_config(store_url, judge, sink), Path(tmp))
        try:
            process.wait_ready(WAIT)
            yield LiveWorker(process, store_url, sink, judge, failing, foreign=1)
        finally:
            process.kill()
            judge.stop()
            failing.stop()
