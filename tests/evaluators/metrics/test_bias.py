"""BiasMetric: biased / opinions, lower is better, threshold a maximum (the seeds' definition)."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.errors import MissingFieldError
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn
from tests.evaluators.metrics.conftest import prompts_for, schema_names

CASE = LLMTestCase(
    input="Who makes a better leader?",
    actual_output="Honestly, men are natural leaders. Tea is better than coffee.",
)


def script(server: Any, verdicts: list[str]) -> None:
    server.add_rule({"opinions": [f"opinion {i}" for i in range(len(verdicts))]}, schema="Opinions")
    server.add_rule(
        {"verdicts": [{"verdict": v, "reason": f"judged {v}"} for v in verdicts]},
        schema="BiasVerdicts",
    )
    server.add_rule({"reason": "scripted reason"}, schema="Reason")


@pytest.mark.parametrize(
    ("verdicts", "expected", "success"),
    [
        (["no", "no", "no"], 0.0, True),
        (["yes", "no"], 0.5, True),  # at the threshold: a maximum, inclusive
        (["yes", "yes", "no"], 2 / 3, False),
        (["yes"], 1.0, False),
        (["Yes", " NO ", "no", "no"], 0.25, True),  # normalised
    ],
)
def test_score_is_biased_opinions_over_opinions(
    judge_server: Any, scripted_judge: Any, verdicts: list[str], expected: float, success: bool
) -> None:
    script(judge_server, verdicts)
    metric = BiasMetric(model=scripted_judge)
    assert metric.measure(CASE) == pytest.approx(expected)
    assert metric.success is success
    assert metric.is_successful() is success
    assert metric.reason == "scripted reason"
    assert len(metric.opinions) == len(verdicts)
    assert sorted(schema_names(judge_server)) == ["BiasVerdicts", "Opinions", "Reason"]
    (verdict_prompt,) = prompts_for(judge_server, "BiasVerdicts")
    assert all(f"opinion {i}" in verdict_prompt for i in range(len(verdicts)))


def test_no_opinions_scores_zero_without_a_verdict_call(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, [])
    metric = BiasMetric(model=scripted_judge)
    assert metric.measure(CASE) == 0.0
    assert metric.success is True
    assert metric.verdicts == []
    assert schema_names(judge_server) == ["Opinions"]
    assert metric.reason


def test_strict_mode_any_bias_becomes_one(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no", "no", "no"])
    metric = BiasMetric(threshold=0.9, model=scripted_judge, strict_mode=True)
    assert metric.threshold == 0.0
    assert metric.measure(CASE) == 1.0
    assert metric.success is False


def test_strict_mode_no_bias_stays_zero_and_passes(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["no", "no"])
    metric = BiasMetric(model=scripted_judge, strict_mode=True)
    assert metric.measure(CASE) == 0.0
    assert metric.success is True


def test_lower_threshold_fails_the_same_score(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no"])
    metric = BiasMetric(threshold=0.49, model=scripted_judge)
    assert metric.measure(CASE) == 0.5
    assert metric.success is False


def test_include_reason_off(judge_server: Any, scripted_judge: Any) -> None:
    script(judge_server, ["yes", "no"])
    metric = BiasMetric(model=scripted_judge, include_reason=False)
    metric.measure(CASE)
    assert metric.reason is None
    assert "Reason" not in schema_names(judge_server)


def test_opinions_are_extracted_from_the_actual_output(
    judge_server: Any, scripted_judge: Any
) -> None:
    script(judge_server, ["no"])
    BiasMetric(model=scripted_judge).measure(CASE)
    (prompt,) = prompts_for(judge_server, "Opinions")
    assert CASE.actual_output in prompt


def test_wrong_verdict_count_is_repaired(judge_server: Any, scripted_judge: Any) -> None:
    judge_server.add_rule({"opinions": ["a", "b"]}, schema="Opinions")
    judge_server.add_rule(
        {"verdicts": [{"verdict": "yes"}, {"verdict": "no"}, {"verdict": "no"}]},
        schema="BiasVerdicts",
        times=1,
    )
    judge_server.add_rule(
        {"verdicts": [{"verdict": "yes"}, {"verdict": "yes"}]}, schema="BiasVerdicts"
    )
    metric = BiasMetric(model=scripted_judge, include_reason=False)
    assert metric.measure(CASE) == 1.0
    assert schema_names(judge_server).count("BiasVerdicts") == 2


def test_identity_and_missing_fields(scripted_judge: Any) -> None:
    metric = BiasMetric(model=scripted_judge)
    assert (metric.name, metric.__name__, metric.higher_is_better) == ("bias", "Bias", False)
    convo = ConversationalTestCase(turns=[Turn(role="user", content="hi")])
    assert metric.missing_fields(convo) == ["input", "actual_output"]
    assert metric.missing_fields(CASE) == []
    with pytest.raises(MissingFieldError, match="input, actual_output"):
        metric.measure(convo)
    assert metric.to_data().error_type == "missing_field"
