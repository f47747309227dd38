"""Production results back as datasets (``spanjudge export``) that both ``evaluate()`` functions
load, and the tables of ``spanjudge scores`` and ``spanjudge calibration``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import spanjudge
from spanjudge._store.sql import SpanStore
from spanjudge.cli.app import cli
from spanjudge.evaluators._judge.dataset import load_dataset
from spanjudge.evaluators._judge.evaluate import evaluate
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from spanjudge.testing import ScriptedJudgeServer
from tests.feedback.conftest import scored


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def offline_judge() -> Iterator[ScriptedJudgeServer]:
    from spanjudge._demo.judge import start_offline_judge

    server = start_offline_judge()
    yield server
    server.stop()


def label_some(store: SpanStore) -> None:
    """A person passes the judge's bias failure and fails a faithfulness pass."""
    [bias_fail] = [r for r in scored(store, metric="bias") if r.label == "fail"]
    passed = [r for r in scored(store, metric="faithfulness") if r.label == "pass"]
    spanjudge.feedback(bias_fail.trace_id, bias_fail.span_id, metric="bias", label="pass",
                       store=store)  # fmt: skip
    spanjudge.feedback(passed[0].trace_id, passed[0].span_id, metric="faithfulness",
                       label="fail", note="it made up the store credit", annotator="li",
                       store=store)  # fmt: skip


@pytest.mark.parametrize(("fmt", "name"), [("deepeval", "failing.json"), ("jsonl", "f.jsonl")])
def test_exported_failures_load_back_and_score_the_same(
    store: SpanStore, store_path: Path, tmp_path: Path, offline_judge: ScriptedJudgeServer,
    fmt: str, name: str,
) -> None:  # fmt: skip
    label_some(store)
    output = tmp_path / name
    done = run("export", "--metric", "faithfulness", "--label", "fail", "--since", "1d",
               "--format", fmt, "-o", str(output), "--store", str(store_path))  # fmt: skip
    assert done.exit_code == 0, done.output
    assert f"wrote 2 test case(s) to {output} ({fmt})" in done.output
    cases = load_dataset(output)
    # the judge's failure, and the pass a person overruled
    by_trace = {c.metadata["trace_id"]: c for c in cases if c.metadata}
    failed = [r for r in scored(store, metric="faithfulness") if r.trace_id in by_trace]
    assert len(failed) == 2
    for result in failed:
        case = by_trace[result.trace_id]
        assert isinstance(case, LLMTestCase) and case.retrieval_context
        meta = case.metadata or {}
        assert meta["judge"]["score"] == result.score and meta["judge"]["reason"] == result.reason
        assert meta["judge"]["verdicts"] == result.verdicts and meta["verdict"] == "fail"
        assert (meta["rule"], meta["span_id"]) == (result.rule, result.span_id)
    overruled = [c for c in cases if (c.metadata or {})["human"]]
    assert [(c.metadata or {})["human"]["note"] for c in overruled] == [
        "it made up the store credit"
    ]
    # spanjudge's evaluate() re-judges the rebuilt cases: same verdicts as in production
    metric = FaithfulnessMetric(threshold=0.7, model=offline_judge.judge())
    again = evaluate(cases, [metric], show_progress=False)
    rejudged = {c.metadata["trace_id"]: t.metrics_data[0].score  # type: ignore[index]
                for c, t in zip(cases, again.test_results, strict=True)}  # fmt: skip
    assert rejudged == {r.trace_id: r.score for r in failed}


def test_deepeval_loads_both_files(store: SpanStore, store_path: Path, tmp_path: Path) -> None:
    from deepeval.dataset import EvaluationDataset

    label_some(store)
    as_json, as_jsonl = tmp_path / "f.json", tmp_path / "f.jsonl"
    for fmt, path in (("deepeval", as_json), ("jsonl", as_jsonl)):
        done = run("export", "--metric", "faithfulness", "--format", fmt, "-o", str(path),
                   "--store", str(store_path))  # fmt: skip
        assert done.exit_code == 0, done.output
    ours = load_dataset(as_json)
    for loader, path in (("add_goldens_from_json_file", as_json),
                         ("add_goldens_from_jsonl_file", as_jsonl)):  # fmt: skip
        dataset = EvaluationDataset()
        getattr(dataset, loader)(str(path))
        assert len(dataset.goldens) == len(ours) == len(scored(store, metric="faithfulness"))
        for golden, case in zip(dataset.goldens, ours, strict=True):
            assert isinstance(case, LLMTestCase)
            assert (golden.input, golden.actual_output) == (case.input, case.actual_output)
            assert golden.retrieval_context == case.retrieval_context
            assert golden.additional_metadata == case.metadata
        commented = [g.comments for g in dataset.goldens if g.comments]
        assert commented == ["it made up the store credit"]


def test_deepevals_evaluate_runs_the_exported_cases(
    store: SpanStore, store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deepeval import evaluate as deepeval_evaluate
    from deepeval.dataset import EvaluationDataset
    from deepeval.evaluate.configs import AsyncConfig, CacheConfig, DisplayConfig
    from deepeval.metrics import FaithfulnessMetric as DeepEvalFaithfulness
    from deepeval.test_case import LLMTestCase as DeepEvalCase

    from spanjudge.evaluators._judge.deepeval_bridge.model import as_deepeval_model

    output = tmp_path / "failing.json"
    done = run("export", "--metric", "faithfulness", "--label", "fail", "-o", str(output),
               "--store", str(store_path))  # fmt: skip
    assert done.exit_code == 0, done.output
    dataset = EvaluationDataset()
    dataset.add_goldens_from_json_file(str(output))
    cases = [
        DeepEvalCase(
            input=g.input,
            actual_output=g.actual_output or "",
            retrieval_context=g.retrieval_context,
        )
        for g in dataset.goldens
    ]
    monkeypatch.chdir(tmp_path)  # deepeval keeps its run files in the working directory
    # deepeval 4.3.1's faithfulness steps, answered by a scripted judge on 127.0.0.1
    with ScriptedJudgeServer() as server:
        server.add_rule({"truths": ["Returns are accepted within 30 days."]}, schema="Truths")
        server.add_rule({"claims": ["Returns are accepted within 90 days."]}, schema="Claims")
        server.add_rule({"verdicts": [{"verdict": "no", "reason": "30, not 90"}]},
                        schema="Verdicts")  # fmt: skip
        server.add_rule({"reason": "It says 90 days."}, schema="FaithfulnessScoreReason")
        metric = DeepEvalFaithfulness(threshold=0.7, model=as_deepeval_model(server.judge()))
        result = deepeval_evaluate(
            cases,
            [metric],
            async_config=AsyncConfig(run_async=False),
            display_config=DisplayConfig(print_results=False, show_indicator=False),
            cache_config=CacheConfig(write_cache=False, use_cache=False),
        )
        prompts = [request.prompt for request in server.requests]
    [only] = cases
    assert any(only.actual_output in prompt for prompt in prompts)  # our case was judged
    [tested] = result.test_results
    assert not tested.success
    assert [(m.score, m.reason) for m in tested.metrics_data or []] == [(0.0, "It says 90 days.")]


def test_a_conversation_exports_as_a_conversational_golden(
    store: SpanStore, store_path: Path, tmp_path: Path, offline_judge: ScriptedJudgeServer
) -> None:
    from deepeval.dataset import EvaluationDataset

    from spanjudge._demo.app import RELEVANT_TOPICS

    output = tmp_path / "topics.json"
    done = run("export", "--metric", "topic_adherence", "-o", str(output), "--store",
               str(store_path))  # fmt: skip
    assert done.exit_code == 0, done.output
    [case] = load_dataset(output)
    assert isinstance(case, ConversationalTestCase) and len(case.turns) == 8
    dataset = EvaluationDataset()
    dataset.add_goldens_from_json_file(str(output))
    [golden] = dataset.goldens
    assert [t.content for t in golden.turns or []] == [t.content for t in case.turns]
    metric = TopicAdherenceMetric(relevant_topics=RELEVANT_TOPICS, threshold=0.8,
                                  model=offline_judge.judge())  # fmt: skip
    [result] = evaluate([case], [metric], show_progress=False).test_results
    [stored] = scored(store, metric="topic_adherence")
    assert result.metrics_data[0].score == stored.score


def test_export_refuses_to_mix_single_turn_and_conversation_cases(
    store_path: Path, tmp_path: Path
) -> None:
    done = run("export", "--label", "fail", "-o", str(tmp_path / "x.json"), "--store",
               str(store_path))  # fmt: skip
    assert done.exit_code == 2
    assert "single-turn or conversation cases, not both" in done.output
    assert not (tmp_path / "x.json").exists()


def test_load_dataset_names_the_bad_item(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "q", "actual_output": "a"}\n{"input": "q"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: a single-turn case needs input"):
        load_dataset(bad)
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="expected a JSON list"):
        load_dataset(tmp_path / "bad.json")


def test_scores_table(store: SpanStore, store_path: Path) -> None:
    label_some(store)
    done = run("scores", "--label", "fail", "--store", str(store_path))
    assert done.exit_code == 0, done.output
    failed = [r for r in scored(store) if r.label == "fail"]
    assert f"{len(failed)} most recent result(s), last 24h" in done.output
    for result in failed:
        assert result.trace_id in done.output
    assert "The context says 30 or 5 days, not 90." in done.output
    assert "openai/scripted-judge" in done.output
    # the human column: the person passed the bias failure
    [bias_row] = [line for line in done.output.splitlines() if " bias " in line]
    assert "│ fail  │ pass  │" in bias_row
    done = run("scores", "--service", "no-such-service", "--store", str(store_path))
    assert "no results in the last 24h" in done.output
    done = run("scores", "--since", "soon", "--store", str(store_path))
    assert done.exit_code == 2 and "--since 'soon'" in done.output


def test_calibration_table_and_json(store: SpanStore, store_path: Path) -> None:
    assert "no labelled results" in run("calibration", "--store", str(store_path)).output
    label_some(store)
    done = run("calibration", "--json", "--store", str(store_path))
    assert done.exit_code == 0, done.output
    rows = {row["rule"]: row for row in json.loads(done.output)}
    assert set(rows) == {"bias-agent", "faithfulness-llm"}
    # each rule has one label, against the judge: accuracy 0 of 1, Wilson [0, 0.793]
    bias = rows["bias-agent"]
    assert (bias["labels"], bias["judge_only_fail"], bias["accuracy"]["value"]) == (1, 1, 0.0)
    assert bias["accuracy"]["high"] == pytest.approx(0.793, abs=1e-3)
    assert bias["true_positive_rate"]["value"] is None  # the person failed nothing
    table = run("calibration", "--metric", "bias", "--store", str(store_path)).output
    assert "bias-agent" in table and "faithfulness-llm" not in table
    assert "1 (few)" in table and "0.00 [0.00, 0.79]" in table
