"""Exactly once across a killed evaluator: a process SIGKILLed mid-judge loses nothing, and the
process that takes over scores and emits each (rule, target) once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from tests.evaluators.loop.test_monitor_e2e import agent

ROOT = Path(__file__).resolve().parents[3]


def test_sigkill_mid_evaluation_loses_and_duplicates_nothing(
    app: Any, store: Any, offline_judge: Any, sink: Any, tmp_path: Path
) -> None:
    for i in range(3):
        agent(f"Question {i}: can I return it?", "Returns are possible within 30 days of delivery.")
    app.flush()
    # The app wrote at the fixture clock's time; the evaluators run 11 s after it (settled).
    offset = app_clock_offset(store)
    offline_judge.latency = 30.0  # every judge call hangs: the victim dies mid-evaluation
    store_url = f"sqlite:///{tmp_path}/spans.db"
    victim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.evaluators.loop.evaluator_process",
            store_url,
            offline_judge.base_url,
            sink.traces_url,
            str(offset),
        ],
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not offline_judge.requests:
            assert victim.poll() is None, (
                victim.stderr.read().decode()[-2000:] if victim.stderr else ""
            )
            assert time.monotonic() < deadline, "the evaluator never called the judge"
            time.sleep(0.05)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
    assert store.results() == []  # killed before anything was stored
    assert store.stats(now=time.time() + offset).leased > 0  # its leases are still held

    offline_judge.latency = 0.0
    time.sleep(2.5)  # the victim's 2 s leases expire
    judge = offline_judge.judge()
    heir = Monitor(
        [
            Rule(FaithfulnessMetric(model=judge), target="llm"),
            Rule(BiasMetric(model=judge), target="agent"),
        ],
        store=store,
        emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url)),
        clock=lambda: time.time() + offset,
        config=MonitorConfig(settle_seconds=10, lease_seconds=2, retention_seconds=None),
    )
    report = heir.tick()
    assert report.requeued + report.claimed >= 6
    results = store.results()
    keys = [(r.rule, r.target_id) for r in results]
    assert len(keys) == 6 and len(set(keys)) == 6  # 3 llm + 3 agent targets, each once
    assert all(r.status == "scored" for r in results)
    sink.wait_for(lambda s: len(s) >= 6)
    time.sleep(0.5)
    ids = [s.span_id for s in sink.spans]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert set(ids) == {r.evaluation_span_id for r in results}
    assert heir.tick().claimed == 0  # nothing left to do


def app_clock_offset(store: Any) -> float:
    """Seconds to add to the wall clock so that the fixture clock's spans look 11 s old."""
    stats_now = 1_800_000_000.0 + 11  # the fixture Clock's start + settle time
    return stats_now - time.time()
