"""The judge is untrusted on the way back too (issue 41): a number that is not finite or not in
range is an error, never a stored NaN; a redirect is never followed with the credentials; an
answer is read up to a byte limit; a reason is kept up to a character limit. Every test runs
over both transports (tests/evaluators/judges/conftest.py)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from pydantic import BaseModel

from spanjudge.errors import JudgeError, JudgeResponseError, MetricError
from spanjudge.evaluators._judge.evaluate import evaluate
from spanjudge.evaluators._judge.judges.answers import parse_answer
from spanjudge.evaluators._judge.judges.guarded_http import MAX_ANSWER_BYTES
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.geval import GEval
from spanjudge.evaluators._judge.metrics.schemas import (
    MAX_REASON_CHARS,
    MetricData,
    Reason,
    bounded_text,
    checked_score,
)
from spanjudge.evaluators._judge.metrics.task_completion import TaskCompletionMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn
from spanjudge.testing import Fault, ScriptedJudgeServer
from tests.evaluators.metrics.agentic_support import case_of, support_trajectory

CASE = LLMTestCase(input="Where is my parcel?", actual_output="It ships tomorrow, sorry!")


def politeness(judge: Any) -> GEval:
    # steps given: the only judge call is the score
    return GEval(name="politeness", evaluation_steps=["Check the tone."], model=judge)


# ------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.5])
def test_a_geval_score_token_with_a_bad_logprob_is_an_error_never_a_nan_score(
    judge_server: ScriptedJudgeServer, scripted_judge: Any, bad: float
) -> None:
    # the probe: score 8 with NaN/Infinity log-probabilities on the score token was
    # stored as score NaN, labelled fail; a log-probability above 0 is no probability either
    judge_server.add_rule(
        {"reason": "Courteous.", "score": 8},
        schema="GEvalScore",
        logprobs={"8": {"8": bad, "7": math.log(0.2)}},
    )
    metric = politeness(scripted_judge)
    with pytest.raises(MetricError) as caught:
        metric.measure(CASE)
    assert caught.value.error_type == "judge_invalid_response"
    assert "log-probability" in str(metric.error)
    assert metric.score is None and metric.success is False
    [row] = evaluate([CASE], [politeness(scripted_judge)]).test_results[0].metrics_data
    assert row.score is None and row.error_type == "judge_invalid_response"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_number_in_the_judges_json_is_an_invalid_answer(number: str) -> None:
    with pytest.raises(ValueError, match="not a finite number"):
        parse_answer(f'{{"goal": "g", "goal_score": 0.5, "plan_score": {number}}}', _Scores)
    with pytest.raises(ValueError, match="not a finite number"):
        parse_answer(f'Here: {{"goal": "g", "goal_score": 0.5, "plan_score": {number}}}', _Scores)


class _Scores(BaseModel):
    goal: str
    goal_score: float
    plan_score: float


def test_a_verdict_of_nan_fails_the_metric_after_the_repairs(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    text = '{"task": "t", "outcome": "o", "verdict": NaN, "reason": "r", "steps": []}'
    judge_server.add_rule(text, schema="TaskCompletionVerdict")
    metric = TaskCompletionMetric(model=scripted_judge)
    with pytest.raises(MetricError) as caught:
        metric.measure(case_of(support_trajectory()))
    assert caught.value.error_type == "judge_invalid_response"
    assert metric.score is None
    assert len(judge_server.requests) == scripted_judge.max_output_attempts  # repaired, then out


class _Fixed(BaseMetric):
    name = display_name = "fixed"

    def __init__(self, value: float, **kwargs: Any) -> None:
        self.value = value
        super().__init__(**kwargs)

    async def _a_compute(self, test_case: Any) -> float:
        return self.value

    async def _a_reason(self, score: float) -> str | None:
        return "r"

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        return []


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1, 1.5])
def test_a_score_that_is_not_a_number_in_0_1_is_an_error(scripted_judge: Any, value: float) -> None:
    metric = _Fixed(value, model=scripted_judge)
    with pytest.raises(MetricError) as caught:
        metric.measure(CASE)
    assert caught.value.error_type == "invalid_score"
    assert metric.score is None and metric.error_type == "invalid_score"
    assert metric.to_data().score is None
    assert _Fixed(1.0, model=scripted_judge).measure(CASE) == 1.0


def test_checked_score_takes_numbers_in_0_1_only() -> None:
    assert checked_score("m", 0) == 0.0 and checked_score("m", 1) == 1.0
    for bad in (math.nan, 2, -1, True, "0.5", None):
        with pytest.raises(MetricError):
            checked_score("m", bad)


# ------------------------------------------------------------------------------ redirects
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_redirect_to_another_origin_is_refused_and_no_credential_reaches_it(
    mode: str, transport: str
) -> None:
    # the probe: a judge answering 307 to another port got every request re-sent there,
    # the case text and the api-key header of judge_options.extra_headers included
    with ScriptedJudgeServer() as judge, ScriptedJudgeServer() as elsewhere:
        judge.add_rule(Fault.redirect(elsewhere.base_url + "/chat/completions"))
        elsewhere.add_rule({"reason": "taken elsewhere"})
        client = judge.judge(
            api_key="sk-the-key",
            extra_headers={"api-key": "the-other-key"},
            max_retries=0,
            timeout=10.0,
        )
        with pytest.raises(JudgeError, match="redirect") as caught:
            if mode == "sync":
                client.generate("What is the refund window?", Reason)
            else:
                asyncio.run(client.a_generate("What is the refund window?", Reason))
        assert not caught.value.retryable
        assert elsewhere.requests == []  # nothing, so no key and no case text, reached it
        [request] = judge.requests
        assert request.headers["api-key"] == "the-other-key"  # the judge itself got them
        assert request.headers["authorization"] == "Bearer sk-the-key"


# ------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_answer_over_the_byte_limit_fails_unread(mode: str, transport: str) -> None:
    # the probe: a 10 MB judge reason was stored and emitted whole (peak 411 MB)
    with ScriptedJudgeServer() as judge:
        judge.add_rule({"reason": "x" * (10 * 1024 * 1024)})
        client = judge.judge(max_retries=0, timeout=30.0)
        with pytest.raises(JudgeResponseError, match=f"over {MAX_ANSWER_BYTES:,} bytes"):
            if mode == "sync":
                client.generate("Why?", Reason)
            else:
                asyncio.run(client.a_generate("Why?", Reason))
        assert len(judge.requests) == 1  # not retried: the answer would be as large again


def test_a_long_reason_is_kept_cut_with_a_marker(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    long = "The assistant answered. " * 2_000  # 48,000 characters, under the byte limit
    judge_server.add_rule({"qa_pairs": [{"question": "q", "response": "r"}]}, schema="QAPairs")
    judge_server.add_rule({"verdict": "TP", "reason": "on topic"}, schema="TopicVerdict")
    judge_server.add_rule({"reason": long}, schema="Reason")
    metric = TopicAdherenceMetric(relevant_topics=["orders"], model=scripted_judge)
    case = ConversationalTestCase(
        turns=[Turn(role="user", content="q"), Turn(role="assistant", content="r")]
    )
    assert metric.measure(case) == 1.0
    assert metric.reason is not None and len(metric.reason) == MAX_REASON_CHARS
    assert metric.reason.startswith("The assistant answered.")
    assert metric.reason.endswith(f"[cut: {len(long):,} characters, {MAX_REASON_CHARS:,} kept]")
    assert metric.to_data().reason == metric.reason


def test_every_result_bounds_its_reason_and_error() -> None:
    data = MetricData(name="m", threshold=0.5, reason="r" * 10**7, error="e" * 10**6)
    assert len(data.reason or "") == len(data.error or "") == MAX_REASON_CHARS
    assert bounded_text("short") == "short" and bounded_text(None) is None


@pytest.mark.parametrize("value", [math.nan, math.inf, 1.5, 0.7])
def test_a_wrapped_deepeval_metric_scoring_outside_0_1_is_an_error(value: float) -> None:
    from deepeval.metrics import BaseMetric as DeepEvalBaseMetric

    from spanjudge.evaluators._judge.deepeval_bridge.metric import DeepEvalMetric

    class Scoring(DeepEvalBaseMetric):  # type: ignore[misc]
        def __init__(self) -> None:
            self.threshold = 0.5

        def measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
            raise NotImplementedError

        async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
            self.score, self.success, self.reason = value, True, "r" * 10_000
            return value

        def is_successful(self) -> bool:
            return True

        @property
        def __name__(self) -> str:
            return "Scoring"

    metric = DeepEvalMetric(Scoring())
    if value == 0.7:  # in range: scored, its 10,000-character reason cut to the limit
        assert metric.measure(CASE) == 0.7
        assert len(metric.to_data().reason or "") == MAX_REASON_CHARS
        return
    with pytest.raises(MetricError) as caught:
        metric.measure(CASE)
    assert caught.value.error_type == "invalid_score"
    data = metric.to_data()
    assert (data.score, data.success, data.error_type) == (None, False, "invalid_score")
