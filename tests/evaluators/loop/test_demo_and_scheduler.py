"""The demo command end to end, and the background scheduler's stop() draining its jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.loop.test_monitor_e2e import agent
from tests.support.otlp_sink import OtlpSink

ROOT = Path(__file__).resolve().parents[3]


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "200"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.run(
        [sys.executable, "-m", "spanjudge.cli", "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_demo_scores_the_three_planted_faults_and_sends_everything_to_the_backend() -> None:
    with OtlpSink() as sink:
        out = run_demo("--otlp-endpoint", sink.endpoint)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        text = out.stdout
        assert "not an LLM" in text  # the judge says what it is
        rows = [line for line in text.splitlines() if "│" in line]
        assert any("faithfulness" in r and "fail" in r and "90" in r for r in rows)
        assert any("bias" in r and "fail" in r for r in rows)
        assert any("topic_adherence" in r and "fail" in r for r in rows)
        # the agent turn whose refund tool failed while its answer reads well
        assert any("tool_errors" in r and "fail" in r for r in rows)
        assert any("task_completion" in r and "fail" in r for r in rows)
        assert "refund" in text and "RefundError" in text
        spans = sink.wait_for(
            lambda s: (
                any(x.name.startswith("evaluation ") for x in s)
                and any(x.name.startswith("invoke_agent") for x in s)
            ),
            timeout=30,
        )
    app_spans = {s.span_id for s in spans if not s.name.startswith("evaluation ")}
    evaluations = [s for s in spans if s.name.startswith("evaluation ")]
    assert len(evaluations) == 21
    assert all(e.parent_span_id in app_spans for e in evaluations)  # in the app's own traces
    # the check's verdict sits in the trace, under the agent turn, naming the failed step
    checks = [e for e in evaluations if e.name == "evaluation tool_errors"]
    # the two turns that called a tool: the filter on the trajectory
    assert len(checks) == len([e for e in evaluations if e.name == "evaluation task_completion"])
    assert len(checks) == 2
    [failed] = [e for e in checks if e.attributes.get(attrs.GEN_AI_EVALUATION_SCORE_VALUE) == 0.0]
    by_id = {s.span_id: s for s in spans}
    assert by_id[failed.parent_span_id].name.startswith("invoke_agent")
    assert "step 2 tool_call refund" in str(
        failed.attributes.get(attrs.GEN_AI_EVALUATION_EXPLANATION)
    )


def test_demo_exits_non_zero_when_the_judge_fails() -> None:
    # a litellm model on a closed loopback port: every judge call fails
    env_model = "openai/unreachable"
    os.environ["OPENAI_API_BASE"] = "http://127.0.0.1:9/v1"
    os.environ.setdefault("OPENAI_API_KEY", "sk-unused")
    try:
        out = run_demo("--judge", env_model)
    finally:
        os.environ.pop("OPENAI_API_BASE", None)
    assert out.returncode == 1, out.stdout[-2000:]
    assert "failed" in out.stdout


def test_stop_lets_the_running_job_finish_and_store_its_result(
    app: Any, store: Any, offline_judge: Any
) -> None:
    agent("Can I return it?", "Returns are possible within 30 days of delivery.")
    app.flush()
    offline_judge.latency = 0.5
    mon = Monitor(
        [Rule(BiasMetric(model=offline_judge.judge(), include_reason=False), target="agent")],
        store=store,
        emitter=None,
        clock=lambda: 1_800_000_000.0 + 11,
        config=MonitorConfig(interval_seconds=0.2, settle_seconds=10, retention_seconds=None),
    ).start()
    deadline = time.monotonic() + 30
    while not offline_judge.requests:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    mon.stop()  # returns once the claimed job is done
    (result,) = store.results()
    assert result.status == "scored"
    assert store.stats(now=1_800_000_000.0 + 11).leased == 0


def test_monitor_started_inside_a_running_loop_ticks_on_that_loop(
    app: Any, store: Any, offline_judge: Any
) -> None:
    import asyncio

    agent("Can I return it?", "Returns are possible within 30 days of delivery.")
    app.flush()

    async def service() -> Any:
        mon = Monitor(
            [Rule(BiasMetric(model=offline_judge.judge()), target="agent")],
            store=store,
            emitter=None,
            clock=lambda: 1_800_000_000.0 + 11,
            config=MonitorConfig(interval_seconds=0.1, settle_seconds=10, retention_seconds=None),
        ).start()
        kind = type(mon._scheduler).__name__
        for _ in range(300):  # the loop stays responsive while the tick runs in a thread
            if store.results():
                break
            await asyncio.sleep(0.05)
        await mon.a_stop()
        return kind

    assert asyncio.run(service()) == "AsyncIOScheduler"
    (result,) = store.results()
    assert result.status == "scored"
