"""evaluate(): every metric on every applicable case, errors and skips recorded per case."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from spanjudge.evaluators._judge.evaluate import EvaluationResult, a_evaluate, evaluate
from spanjudge.evaluators._judge.judges.base import Judge
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.outcome import run_sync
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn
from tests.evaluators.metrics.conftest import schema_names

RAG = LLMTestCase(
    name="rag",
    input="Refunds?",
    actual_output="Refunds within 30 days.",
    retrieval_context=["Refunds are possible within 30 days."],
)
NO_CONTEXT = LLMTestCase(name="plain", input="Hi", actual_output="Men are natural leaders.")
CONVO = ConversationalTestCase(
    name="chat",
    turns=[
        Turn(role="user", content="Where is my order?"),
        Turn(role="assistant", content="Sent."),
    ],
)


def script(server: Any) -> None:
    server.add_rule({"truths": ["Refunds within 30 days."]}, schema="Truths")
    server.add_rule({"claims": ["Refunds within 30 days."]}, schema="Claims")
    server.add_rule(
        {"verdicts": [{"verdict": "yes", "reason": "ok"}]}, schema="FaithfulnessVerdicts"
    )
    server.add_rule(
        {"opinions": ["Men are natural leaders."]}, schema="Opinions", contains="leaders"
    )
    server.add_rule({"opinions": []}, schema="Opinions")
    server.add_rule({"verdicts": [{"verdict": "yes", "reason": "gender"}]}, schema="BiasVerdicts")
    server.add_rule({"qa_pairs": [{"question": "Where?", "response": "Sent."}]}, schema="QAPairs")
    server.add_rule({"verdict": "TP", "reason": "on topic"}, schema="TopicVerdict")
    server.add_rule({"reason": "scripted reason"}, schema="Reason")


def test_evaluate_scores_applicable_cases_and_skips_the_rest(
    judge_server: Any, scripted_judge: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    script(judge_server)
    metrics = [
        FaithfulnessMetric(model=scripted_judge),
        BiasMetric(model=scripted_judge),
        TopicAdherenceMetric(["orders"], model=scripted_judge),
    ]
    result = evaluate([RAG, NO_CONTEXT, CONVO], metrics, max_concurrency=4, show_progress=True)
    assert isinstance(result, EvaluationResult)
    rag, plain, chat = result.test_results
    assert [d.name for d in rag.metrics_data] == ["faithfulness", "bias", "topic_adherence"]

    assert (rag.metrics_data[0].score, rag.metrics_data[0].success) == (1.0, True)
    assert (rag.metrics_data[1].score, rag.metrics_data[1].success) == (0.0, True)
    assert rag.metrics_data[2].skipped and "ConversationalTestCase" in (
        rag.metrics_data[2].skip_reason or ""
    )
    assert rag.success is True

    assert plain.metrics_data[0].skipped
    assert plain.metrics_data[0].skip_reason == "missing required field(s): retrieval_context"
    assert (
        plain.metrics_data[0].score is None and plain.metrics_data[0].error_type == "missing_field"
    )
    assert (plain.metrics_data[1].score, plain.metrics_data[1].success) == (1.0, False)
    assert plain.success is False

    assert chat.metrics_data[0].skipped and chat.metrics_data[1].skipped
    assert chat.metrics_data[2].score == 1.0 and chat.conversational

    faith, bias, topic = result.metrics_summary
    assert (faith.evaluated, faith.skipped, faith.errors, faith.mean_score) == (1, 2, 0, 1.0)
    assert (bias.evaluated, bias.mean_score, bias.pass_rate) == (2, 0.5, 0.5)
    assert (topic.evaluated, topic.skipped) == (1, 2)
    # calls: faithfulness 4, bias 3 (+1 opinions-only case), topic 3
    assert faith.judge_calls == 4 and bias.judge_calls == 4 and topic.judge_calls == 3
    assert len(judge_server.requests) == 11
    assert faith.input_tokens > 0

    out = capsys.readouterr().out
    assert "Faithfulness" in out and "Topic Adherence" in out and "Judge calls" in out

    dumped = json.loads(result.model_dump_json())
    assert dumped["test_results"][1]["metrics_data"][0]["skip_reason"].endswith("retrieval_context")
    assert EvaluationResult.model_validate_json(result.model_dump_json()) == result


def test_evaluate_records_judge_errors_per_case(
    judge_server: Any, scripted_judge: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from spanjudge.testing import Fault

    judge_server.add_rule(Fault.malformed("{broken"), schema="Opinions", contains="leaders")
    judge_server.add_rule({"opinions": []}, schema="Opinions")
    metric = BiasMetric(model=scripted_judge)
    result = evaluate([RAG, NO_CONTEXT], [metric], show_progress=False)
    ok, failed = (r.metrics_data[0] for r in result.test_results)
    assert ok.score == 0.0 and ok.error is None
    assert failed.score is None and failed.success is False
    assert failed.error and failed.error_type and failed.error_type != "missing_field"
    assert result.metrics_summary[0].errors == 1
    assert result.metrics_summary[0].mean_score == 0.0
    # the shared metric object itself was never run: evaluate works on clones
    assert metric.score is None
    assert "Bias" in capsys.readouterr().out


def test_evaluate_needs_metrics() -> None:
    with pytest.raises(ValueError, match="metric"):
        evaluate([RAG], [])


async def test_evaluate_inside_a_running_loop(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server)
    result = evaluate([NO_CONTEXT], [BiasMetric(model=scripted_judge)], print_results=False)
    assert result.test_results[0].metrics_data[0].score == 1.0
    assert schema_names(judge_server).count("Opinions") == 1


class _CountedRepr:
    reprs = 0

    def __repr__(self) -> str:
        type(self).reprs += 1
        return "_CountedRepr()"


def test_run_sync_hands_back_the_result_without_formatting_it() -> None:
    # CPython 3.11's asyncio.run formats its SIGINT handler's repr, which shows the main task's
    # result: for a large evaluate() result that took half a second after the last judge call
    async def make() -> _CountedRepr:
        return _CountedRepr()

    result = run_sync(make())
    assert isinstance(result, _CountedRepr)
    assert _CountedRepr.reprs == 0


def test_run_sync_raises_what_the_coroutine_raises() -> None:
    async def fail() -> None:
        raise LookupError("from the coroutine")

    with pytest.raises(LookupError, match="from the coroutine"):
        run_sync(fail())


class _Gated(BaseMetric):
    """Counts the evaluations that started, then waits for the test to let them finish."""

    name = "gated"
    display_name = "Gated"
    required_fields = ("input", "actual_output")
    started = 0
    gate: asyncio.Event

    async def _a_compute(self, test_case: Any) -> float:
        type(self).started += 1
        await type(self).gate.wait()
        return 1.0

    async def _a_reason(self, score: float) -> str | None:
        return None

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        return []


class _NoJudge(Judge):
    def _complete(self, messages: Any, schema: Any) -> Any:
        raise AssertionError("no judge call expected")

    async def _a_complete(self, messages: Any, schema: Any) -> Any:
        raise AssertionError("no judge call expected")


async def test_evaluations_start_in_batches_with_the_loop_running_between() -> None:
    # a judge answer that arrives while a thousand evaluations start is read between batches,
    # not after every one of them has built its first prompt
    _Gated.started, _Gated.gate = 0, asyncio.Event()
    total = 400
    seen: list[int] = []

    async def probe() -> None:
        while _Gated.started < total:
            seen.append(_Gated.started)
            await asyncio.sleep(0)
        _Gated.gate.set()

    result, _ = await asyncio.gather(
        a_evaluate(
            [NO_CONTEXT] * total,
            [_Gated(model=_NoJudge())],
            max_concurrency=total,
            show_progress=False,
            print_results=False,
        ),
        probe(),
    )
    assert [r.metrics_data[0].score for r in result.test_results] == [1.0] * total
    between = [n for n in seen if 0 < n < total]
    assert len(between) >= total // 16 - 2, seen


async def test_cancelled_while_starting_leaves_no_evaluation_running() -> None:
    _Gated.started, _Gated.gate = 0, asyncio.Event()
    run = asyncio.ensure_future(
        a_evaluate(
            [NO_CONTEXT] * 400,
            [_Gated(model=_NoJudge())],
            max_concurrency=400,
            show_progress=False,
            print_results=False,
        )
    )
    while _Gated.started < 40:  # some batches started, not all
        await asyncio.sleep(0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    for _ in range(3):
        await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert 40 <= _Gated.started < 400
