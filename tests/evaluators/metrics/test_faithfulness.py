"""FaithfulnessMetric against the scripted judge: hand-computed scores for every verdict mix."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from spanjudge.errors import MetricError, MissingFieldError
from spanjudge.evaluators._judge.metrics.faithfulness import (
    FaithfulnessMetric,
    FaithfulnessTemplate,
)
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn
from tests.evaluators.metrics.conftest import prompts_for, schema_names

CASE = LLMTestCase(
    input="What if these shoes don't fit?",
    actual_output="We offer a 30-day full refund at no extra cost.",
    retrieval_context=["All customers are eligible for a 30 day full refund at no extra cost."],
)


def script(server: Any, verdicts: list[str], *, claims: list[str] | None = None) -> None:
    claims = claims if claims is not None else [f"claim {i}" for i in range(len(verdicts))]
    server.add_rule(
        {"truths": ["Refunds within 30 days.", "Refunds cost nothing."]}, schema="Truths"
    )
    server.add_rule({"claims": claims}, schema="Claims")
    server.add_rule(
        {"verdicts": [{"verdict": v, "reason": f"judged {v}"} for v in verdicts]},
        schema="FaithfulnessVerdicts",
    )
    server.add_rule({"reason": "scripted reason"}, schema="Reason")


@pytest.mark.parametrize(
    ("verdicts", "penalize", "expected"),
    [
        (["yes", "yes", "yes"], False, 1.0),
        (["no", "no"], False, 0.0),
        (["yes", "no", "idk", "idk"], False, 0.75),  # idk counts as faithful ...
        (["yes", "no", "idk", "idk"], True, 0.25),  # ... unless ambiguity is penalised
        (["yes", "borderline", "no"], False, 2 / 3),  # borderline is idk
        (["yes", "borderline", "no"], True, 1 / 3),
        (["YES", " No ", "IDK"], False, 2 / 3),  # case and whitespace normalised
        (["idk"], True, 0.0),
    ],
)
def test_score_is_claims_not_contradicted_over_claims(
    judge_server: Any, scripted_judge: Any, verdicts: list[str], penalize: bool, expected: float
) -> None:
    script(judge_server, verdicts)
    metric = FaithfulnessMetric(model=scripted_judge, penalize_ambiguous_claims=penalize)
    assert metric.measure(CASE) == pytest.approx(expected)
    assert metric.score == pytest.approx(expected)
    assert metric.success is (expected >= 0.5)
    assert metric.reason == "scripted reason"
    assert metric.error is None
    assert [v.verdict for v in metric.verdicts] == [
        {"borderline": "idk"}.get(v.strip().lower(), v.strip().lower()) for v in verdicts
    ]
    assert len(metric.claims) == len(verdicts)
    assert metric.truths == ["Refunds within 30 days.", "Refunds cost nothing."]
    # truths and claims, one verdict call for all claims, one reason call
    assert sorted(schema_names(judge_server)) == sorted(
        ["Truths", "Claims", "FaithfulnessVerdicts", "Reason"]
    )
    assert metric.judge_calls == 4
    assert metric.input_tokens > 0 and metric.output_tokens > 0


def test_threshold_is_a_minimum_and_inclusive(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no"])
    at = FaithfulnessMetric(threshold=0.5, model=scripted_judge)
    assert at.measure(CASE) == 0.5
    assert at.success is True and at.is_successful()
    above = FaithfulnessMetric(threshold=0.51, model=scripted_judge)
    assert above.measure(CASE) == 0.5
    assert above.success is False and not above.is_successful()


def test_strict_mode_perfect_score_passes(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "idk"])
    metric = FaithfulnessMetric(threshold=0.3, model=scripted_judge, strict_mode=True)
    assert metric.threshold == 1.0
    assert metric.measure(CASE) == 1.0
    assert metric.success is True


def test_strict_mode_imperfect_score_becomes_zero(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "yes", "yes", "no"])
    metric = FaithfulnessMetric(threshold=0.3, model=scripted_judge, strict_mode=True)
    assert metric.measure(CASE) == 0.0
    assert metric.success is False
    assert metric.to_data().strict_mode is True
    assert metric.to_data().threshold == 1.0


def test_no_claims_scores_one_without_a_verdict_call(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, [], claims=[])
    metric = FaithfulnessMetric(model=scripted_judge)
    assert metric.measure(CASE) == 1.0
    assert metric.success is True
    assert metric.verdicts == []
    assert "FaithfulnessVerdicts" not in schema_names(judge_server)
    assert metric.reason  # explained without a judge call
    assert "Reason" not in schema_names(judge_server)


def test_include_reason_off_makes_no_reason_call(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no"])
    metric = FaithfulnessMetric(model=scripted_judge, include_reason=False)
    assert metric.measure(CASE) == 0.5
    assert metric.reason is None
    assert "Reason" not in schema_names(judge_server)
    assert metric.judge_calls == 3


def test_truths_come_from_the_joined_context_and_claims_from_the_output(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["yes"])
    case = CASE.model_copy(update={"retrieval_context": ["First document.", "Second document."]})
    FaithfulnessMetric(model=scripted_judge, truths_extraction_limit=3).measure(case)
    (truths_prompt,) = prompts_for(judge_server, "Truths")
    assert "First document.\n\nSecond document." in truths_prompt
    assert "3 most important" in truths_prompt
    (claims_prompt,) = prompts_for(judge_server, "Claims")
    assert CASE.actual_output in claims_prompt
    (verdict_prompt,) = prompts_for(judge_server, "FaithfulnessVerdicts")
    assert "Refunds within 30 days." in verdict_prompt and "claim 0" in verdict_prompt


def test_truths_are_cut_to_the_extraction_limit(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes"])
    metric = FaithfulnessMetric(model=scripted_judge, truths_extraction_limit=1)
    metric.measure(CASE)
    assert metric.truths == ["Refunds within 30 days."]


def test_same_context_reuses_cached_truths(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no"])
    first = FaithfulnessMetric(model=scripted_judge)
    first.measure(CASE)
    assert first.truths_cache_hit is False
    other_output = CASE.model_copy(update={"actual_output": "Refunds take 60 days."})
    second = FaithfulnessMetric(model=scripted_judge)  # another instance: the cache is shared
    assert second.measure(other_output) == 0.5
    assert second.truths_cache_hit is True
    assert second.truths == first.truths
    assert schema_names(judge_server).count("Truths") == 1
    assert schema_names(judge_server).count("Claims") == 2
    assert second.judge_calls == 3
    # a different extraction limit is a different key
    FaithfulnessMetric(model=scripted_judge, truths_extraction_limit=5).measure(CASE)
    assert schema_names(judge_server).count("Truths") == 2


async def test_concurrent_cases_with_one_context_extract_truths_once(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["yes"])
    metrics = [FaithfulnessMetric(model=scripted_judge) for _ in range(4)]
    scores = await asyncio.gather(*(m.a_measure(CASE) for m in metrics))
    assert scores == [1.0] * 4
    assert schema_names(judge_server).count("Truths") == 1
    assert sum(m.truths_cache_hit for m in metrics) == 3


def test_wrong_verdict_count_is_repaired(judge_server: Any, scripted_judge: Any) -> None:
    judge_server.add_rule({"truths": ["t"]}, schema="Truths")
    judge_server.add_rule({"claims": ["a", "b"]}, schema="Claims")
    # one verdict for two claims cannot be aligned: invalid output, asked again
    judge_server.add_rule({"verdicts": [{"verdict": "no"}]}, schema="FaithfulnessVerdicts", times=1)
    judge_server.add_rule(
        {"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]}, schema="FaithfulnessVerdicts"
    )
    judge_server.add_rule({"reason": "r"}, schema="Reason")
    metric = FaithfulnessMetric(model=scripted_judge)
    assert metric.measure(CASE) == 0.5
    assert schema_names(judge_server).count("FaithfulnessVerdicts") == 2


def test_empty_retrieval_context_is_a_missing_field(judge_server: Any, scripted_judge: Any) -> None:
    metric = FaithfulnessMetric(model=scripted_judge)
    for context in (None, [], ["  "]):
        case = CASE.model_copy(update={"retrieval_context": context})
        assert metric.missing_fields(case) == ["retrieval_context"]
        with pytest.raises(MissingFieldError, match="retrieval_context") as info:
            metric.measure(case)
        assert info.value.fields == ["retrieval_context"]
        assert metric.score is None
        assert metric.error_type == "missing_field"
        assert metric.to_data().error_type == "missing_field"
    assert judge_server.requests == []


def test_a_conversation_misses_every_required_field(scripted_judge: Any) -> None:
    metric = FaithfulnessMetric(model=scripted_judge)
    convo = ConversationalTestCase(turns=[Turn(role="user", content="hi")])
    assert metric.missing_fields(convo) == ["input", "actual_output", "retrieval_context"]


def test_judge_failure_sets_error_and_raises(judge_server: Any, scripted_judge: Any) -> None:
    from spanjudge.errors import JudgeError
    from spanjudge.testing import Fault

    judge_server.add_rule({"truths": ["t"]}, schema="Truths")
    judge_server.add_rule(Fault.malformed("not json at all"), schema="Claims")
    metric = FaithfulnessMetric(model=scripted_judge)
    with pytest.raises(MetricError) as info:
        metric.measure(CASE)
    assert isinstance(info.value.__cause__, JudgeError)
    assert info.value.error_type == info.value.__cause__.error_type
    assert metric.score is None  # never a 0 or a 1
    assert metric.success is False
    assert metric.error and metric.error_type == info.value.error_type
    data = metric.to_data()
    assert data.score is None and data.error_type == metric.error_type
    assert "Error" in (metric.verbose_logs or "")


async def test_measure_works_inside_a_running_event_loop(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["yes", "no"])
    metric = FaithfulnessMetric(model=scripted_judge)
    assert metric.measure(CASE) == 0.5  # sync call from a coroutine: no "loop already running"


def test_async_mode_off_gives_the_same_score(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no", "idk"])
    metric = FaithfulnessMetric(model=scripted_judge, async_mode=False)
    assert metric.measure(CASE) == pytest.approx(2 / 3)
    assert schema_names(judge_server)[:2] == ["Truths", "Claims"]  # in order, one at a time


class ShoutingTemplate(FaithfulnessTemplate):
    @staticmethod
    def generate_claims(actual_output: str) -> str:
        return f"CUSTOM CLAIMS PROMPT. Return JSON with key claims. Text: {actual_output}"


def test_custom_evaluation_template_is_used(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes"])
    metric = FaithfulnessMetric(model=scripted_judge, evaluation_template=ShoutingTemplate)
    metric.measure(CASE)
    (claims_prompt,) = prompts_for(judge_server, "Claims")
    assert "CUSTOM CLAIMS PROMPT" in claims_prompt
    assert metric.clone().evaluation_template is ShoutingTemplate


def test_verbose_logs_hold_every_step_and_verbose_mode_prints(
    judge_server: Any, scripted_judge: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    script(judge_server, ["yes", "no"])
    quiet = FaithfulnessMetric(model=scripted_judge)
    quiet.measure(CASE)
    logs = quiet.verbose_logs or ""
    for step in ("Truths", "Claims", "Verdicts", "Score", "Reason"):
        assert f"{step}" in logs
    assert capsys.readouterr().out == ""
    loud = FaithfulnessMetric(model=scripted_judge, verbose_mode=True)
    loud.measure(CASE)
    assert "Faithfulness Verbose Logs" in capsys.readouterr().out


def test_clone_keeps_configuration_and_judge(scripted_judge: Any) -> None:
    metric = FaithfulnessMetric(
        threshold=0.7,
        model=scripted_judge,
        include_reason=False,
        truths_extraction_limit=4,
        penalize_ambiguous_claims=True,
    )
    twin = metric.clone()
    assert twin is not metric
    assert twin.model is metric.model
    assert (twin.threshold, twin.include_reason) == (0.7, False)
    assert (twin.truths_extraction_limit, twin.penalize_ambiguous_claims) == (4, True)


def test_identity_attributes() -> None:
    assert FaithfulnessMetric.name == "faithfulness"
    assert FaithfulnessMetric.required_fields == ("input", "actual_output", "retrieval_context")
    assert FaithfulnessMetric.higher_is_better is True
    assert FaithfulnessMetric.conversational is False


def test_to_data_carries_the_result(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no"], claims=["c1", "c2"])
    metric = FaithfulnessMetric(model=scripted_judge)
    metric.measure(CASE)
    data = metric.to_data()
    assert metric.__name__ == "Faithfulness"
    assert data.name == "faithfulness"
    assert (data.score, data.success, data.reason, data.error) == (
        0.5,
        True,
        "scripted reason",
        None,
    )
    assert data.judge_model == scripted_judge.get_model_name()
    assert data.judge_calls == 4
    assert data.verdicts == [
        {"claim": "c1", "verdict": "yes", "reason": "judged yes"},
        {"claim": "c2", "verdict": "no", "reason": "judged no"},
    ]
    assert data.duration_seconds is not None and data.duration_seconds >= 0
    assert data.model_dump_json()
