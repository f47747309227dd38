"""`spanjudge backfill --retry-errors` (issue 30 item 4): errored results from a judge outage are
evaluated again, each errored result kept as superseded; without the flag they are left alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store import open_store
from spanjudge._store.models import JobSpec
from spanjudge.cli.app import cli
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.online.spans import Trace


def an_errored_evaluation(url: str, at: float) -> str:
    """A stored LLM turn whose evaluation ended as a judge error (an outage), at ``at``."""
    trace = Trace()
    llm = trace.llm("Where is my order?", "It ships tomorrow.")
    with open_store(url) as store:
        store.write_spans(trace.spans, now=at)
        spec = JobSpec("bias", "llm", llm.span_id, llm.trace_id, llm.span_id)
        store.enqueue_planned([spec], traces=[llm.trace_id], now=at + 10)
        [job] = store.claim_jobs(owner="w", limit=1, lease_seconds=60, now=at + 10)
        error = EvaluationRecord("bias", "bias", "llm", llm.span_id, llm.trace_id, llm.span_id)
        error.status, error.error_type = "error", "judge_connection"
        assert store.complete_job(job.job_id, owner="w", record=error, now=at + 11)
    return llm.span_id


def test_backfill_retry_errors_evaluates_errored_results_again(tmp_path: Path, sink: Any) -> None:
    url = f"sqlite:///{tmp_path}/spans.db"
    target = an_errored_evaluation(url, at=time.time() - 3600)
    with ScriptedJudgeServer() as judge:
        judge.add_rule({"opinions": []}, schema="Opinions")
        judge.add_rule({"reason": "No opinions."}, schema="Reason")
        config = tmp_path / "worker.toml"
        config.write_text(
            f"""
store_url = "{url}"
judge_model = "openai/scripted-judge"
judge_options = {{ api_base = "{judge.base_url}", api_key = "x" }}
downstream_endpoint = "{sink.endpoint}"

[[rules]]
name = "bias"
metric = "bias"
target = "llm"
"""
        )
        plain = CliRunner().invoke(cli, ["backfill", "--since", "2h", "--config", str(config)])
        assert plain.exit_code == 0, plain.output
        assert "0 scored" in plain.output and "redone" not in plain.output
        again = CliRunner().invoke(
            cli, ["backfill", "--since", "2h", "--retry-errors", "--config", str(config)]
        )
    assert again.exit_code == 0, again.output
    assert "1 errored results redone" in again.output and "1 scored" in again.output
    with open_store(url) as store:
        [current] = store.results()
        assert (current.target_id, current.status) == (target, "scored")
        [old] = store.superseded_results()
        assert (old.record.status, old.reason) == ("error", "retry_errors")
