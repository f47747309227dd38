"""TopicAdherenceMetric: unit interactions, per-pair TP/TN/FP/FN, score (TP+TN)/pairs."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge.errors import MissingFieldError
from spanjudge.evaluators._judge.metrics.topic_adherence import (
    TopicAdherenceMetric,
    unit_interactions,
)
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn
from tests.evaluators.metrics.conftest import prompts_for, schema_names

TOPICS = ["orders", "refunds"]


def turns(*spec: str) -> list[Turn]:
    """'u:text' / 'a:text' -> turns."""
    return [Turn(role="user" if s.startswith("u:") else "assistant", content=s[2:]) for s in spec]


def convo(*spec: str) -> ConversationalTestCase:
    return ConversationalTestCase(turns=turns(*spec))


def test_units_split_at_each_assistant_to_user_boundary() -> None:
    units = unit_interactions(turns("u:q1", "u:q1b", "a:r1", "a:r1b", "u:q2", "a:r2", "u:q3"))
    assert [[t.content for t in u] for u in units] == [["q1", "q1b", "r1", "r1b"], ["q2", "r2"]]
    # an assistant-only opening holds no question; a trailing user turn has no answer
    assert unit_interactions(turns("a:hello", "u:q", "a:r")) == [turns("u:q", "a:r")]
    assert unit_interactions(turns("u:q")) == []


def script_pairs(server: Any) -> None:
    # each unit's prompt names its question; the judge answers one pair per unit
    for q in ("q1", "q2", "q3", "q4"):
        server.add_rule(
            {"qa_pairs": [{"question": q, "response": f"answer to {q}"}]},
            schema="QAPairs",
            contains=f"user: {q}",
        )


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["TP", "TP", "TP", "TP"], 1.0),
        (["TP", "TN", "FP", "FN"], 0.5),
        (["tn", "fp", "fp", "fp"], 0.25),  # normalised to upper case
        (["FP", "FN", "FN", "FP"], 0.0),
    ],
)
def test_score_is_tp_plus_tn_over_pairs(
    judge_server: Any, scripted_judge: Any, labels: list[str], expected: float
) -> None:
    script_pairs(judge_server)
    for i, label in enumerate(labels, start=1):
        judge_server.add_rule(
            {"verdict": label, "reason": f"q{i} is {label}"},
            schema="TopicVerdict",
            contains=quote("Question", f"q{i}"),
        )
    judge_server.add_rule({"reason": "scripted reason"}, schema="Reason")
    metric = TopicAdherenceMetric(relevant_topics=TOPICS, model=scripted_judge)
    case = convo("u:q1", "a:r1", "u:q2", "a:r2", "u:q3", "a:r3", "u:q4", "a:r4")
    assert metric.measure(case) == pytest.approx(expected)
    assert metric.success is (expected >= 0.5)
    assert [p.question for p in metric.qa_pairs] == ["q1", "q2", "q3", "q4"]  # in order
    assert [v.verdict for v in metric.verdicts] == [label.upper() for label in labels]
    counts = {k: len(v) for k, v in metric.truth_table.items()}
    assert sum(counts.values()) == 4
    assert counts["TP"] + counts["TN"] == round(expected * 4)
    names = schema_names(judge_server)
    assert names.count("QAPairs") == 4 and names.count("TopicVerdict") == 4
    assert names.count("Reason") == 1
    assert metric.reason == "scripted reason"
    for prompt in prompts_for(judge_server, "TopicVerdict"):
        assert '"orders"' in prompt and '"refunds"' in prompt


def test_several_pairs_in_one_unit_each_get_a_verdict(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule(
        {"qa_pairs": [{"question": "a", "response": "x"}, {"question": "b", "response": "y"}]},
        schema="QAPairs",
    )
    judge_server.add_rule({"verdict": "TP"}, schema="TopicVerdict", contains=quote("Question", "a"))
    judge_server.add_rule({"verdict": "FP"}, schema="TopicVerdict", contains=quote("Question", "b"))
    metric = TopicAdherenceMetric(TOPICS, model=scripted_judge, include_reason=False)
    assert metric.measure(convo("u:a and b?", "a:x and y")) == 0.5
    assert schema_names(judge_server).count("TopicVerdict") == 2
    assert metric.reason is None and "Reason" not in schema_names(judge_server)


def test_trailing_user_turn_is_not_sent_to_the_judge(
    judge_server: Any, scripted_judge: Any
) -> None:
    script_pairs(judge_server)
    judge_server.add_rule({"verdict": "TP"}, schema="TopicVerdict")
    metric = TopicAdherenceMetric(TOPICS, model=scripted_judge, include_reason=False)
    assert metric.measure(convo("u:q1", "a:r1", "u:q2")) == 1.0
    assert schema_names(judge_server) == ["QAPairs", "TopicVerdict"]
    assert "q2" not in prompts_for(judge_server, "QAPairs")[0]


def test_no_pairs_scores_zero_with_a_reason_and_no_verdict_call(
    judge_server: Any, scripted_judge: Any
) -> None:
    judge_server.add_rule({"qa_pairs": []}, schema="QAPairs")
    metric = TopicAdherenceMetric(TOPICS, model=scripted_judge)
    assert metric.measure(convo("u:hello", "a:hi there")) == 0.0
    assert metric.success is False
    assert "no question/answer pairs" in (metric.reason or "")
    assert schema_names(judge_server) == ["QAPairs"]


def test_no_units_scores_zero_without_any_call(judge_server: Any, scripted_judge: Any) -> None:
    metric = TopicAdherenceMetric(TOPICS, model=scripted_judge)
    assert metric.measure(convo("u:anyone there?")) == 0.0
    assert judge_server.requests == []


def test_strict_mode(judge_server: Any, scripted_judge: Any) -> None:
    script_pairs(judge_server)
    judge_server.add_rule(
        {"verdict": "TP"}, schema="TopicVerdict", contains=quote("Question", "q1")
    )
    judge_server.add_rule({"verdict": "FN"}, schema="TopicVerdict")
    judge_server.add_rule({"reason": "scripted reason"}, schema="Reason")
    imperfect = TopicAdherenceMetric(TOPICS, threshold=0.1, model=scripted_judge, strict_mode=True)
    assert imperfect.threshold == 1.0
    assert imperfect.measure(convo("u:q1", "a:r1", "u:q2", "a:r2")) == 0.0
    assert imperfect.success is False
    perfect = imperfect.clone()
    assert perfect.measure(convo("u:q1", "a:r1")) == 1.0
    assert perfect.success is True


def test_relevant_topics_are_required(scripted_judge: Any) -> None:
    with pytest.raises(ValueError, match="relevant_topics"):
        TopicAdherenceMetric(relevant_topics=[], model=scripted_judge)


def test_identity_and_missing_fields(scripted_judge: Any) -> None:
    metric = TopicAdherenceMetric(TOPICS, model=scripted_judge)
    assert metric.name == "topic_adherence" and metric.__name__ == "Topic Adherence"
    assert metric.conversational is True and metric.higher_is_better is True
    single = LLMTestCase(input="q", actual_output="a")
    assert metric.missing_fields(single) == ["turns"]
    with pytest.raises(MissingFieldError, match="turns"):
        metric.measure(single)
    assert metric.clone().relevant_topics == TOPICS
