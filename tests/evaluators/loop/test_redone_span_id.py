"""A result redone by `backfill --retry-errors` goes out as an evaluation span of its own: its id
folds in how many results of the target were superseded, so a backend that keeps spans by id
neither shows the old errored span in its place nor both under one id. A never-redone result
keeps the id derived from (rule, target) alone, as every release sent it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from spanjudge._core.span_record import EvaluationRecord, evaluation_span_id
from spanjudge._store import open_store
from spanjudge.cli.app import cli
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.loop.test_backfill_retry_errors import an_errored_evaluation


def test_a_never_redone_result_keeps_the_id_every_release_sent() -> None:
    # sha256("bias\x1fllm\x1f00000000000000aa")[:16], the id before revisions existed
    assert evaluation_span_id("bias", "llm", "00000000000000aa") == "2bcc423a1c11046c"
    assert evaluation_span_id("bias", "llm", "00000000000000aa", 0) == "2bcc423a1c11046c"
    record = EvaluationRecord("bias", "bias", "llm", "00000000000000aa", "0" * 32, "aa")
    assert record.revision == 0 and record.evaluation_span_id == "2bcc423a1c11046c"


def test_each_revision_is_a_distinct_deterministic_id() -> None:
    ids = [evaluation_span_id("bias", "conversation", "c-1", n) for n in range(5)]
    assert len(set(ids)) == 5
    assert ids == [evaluation_span_id("bias", "conversation", "c-1", n) for n in range(5)]
    assert all(len(i) == 16 and int(i, 16) for i in ids)


def test_backfill_retry_errors_sends_the_redone_result_under_a_new_span_id(
    tmp_path: Path, sink: Any
) -> None:
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
outputs = ["span"]

[[rules]]
name = "bias"
metric = "bias"
target = "llm"
"""
        )
        again = CliRunner().invoke(
            cli, ["backfill", "--since", "2h", "--retry-errors", "--config", str(config)]
        )
    assert again.exit_code == 0, again.output
    with open_store(url) as store:
        [current] = store.results()
        [old] = store.superseded_results()
    assert current.status == "scored" and old.record.status == "error"
    assert old.record.evaluation_span_id == evaluation_span_id("bias", "llm", target)
    assert current.revision == 1
    assert current.evaluation_span_id == evaluation_span_id("bias", "llm", target, 1)
    assert current.evaluation_span_id != old.record.evaluation_span_id
    spans = [s for s in sink.spans if attrs.GEN_AI_EVALUATION_NAME in s.attributes]
    assert [s.span_id for s in spans] == [current.evaluation_span_id]
