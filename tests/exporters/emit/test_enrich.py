"""Enrich-mode score attributes: one documented key set per metric."""

from __future__ import annotations

from spanjudge.exporters._emit.evaluation_result import (
    MAX_REASON_CHARS,
    score_attributes,
    score_key,
)
from tests.exporters.emit.conftest import make_record


def test_scored_and_error_records_on_one_span() -> None:
    records = [
        make_record(metric="faithfulness", score=0.75, label="pass", success=True, reason="ok"),
        make_record(
            rule="bias-llm",
            metric="bias",
            status="error",
            score=None,
            label=None,
            success=None,
            reason=None,
            error_type="Timeout",
        ),
        make_record(
            rule="topic",
            metric="Topic Adherence",
            status="skipped",
            score=None,
            label=None,
            success=None,
            reason=None,
        ),
    ]
    assert score_attributes(records) == {
        "spanjudge.score.faithfulness.value": 0.75,
        "spanjudge.score.faithfulness.label": "pass",
        "spanjudge.score.faithfulness.success": True,
        "spanjudge.score.faithfulness.reason": "ok",
        "spanjudge.score.bias.error_type": "Timeout",
        "spanjudge.score.topic_adherence.error_type": "missing_field",
    }


def test_scored_wins_over_error_for_the_same_metric_and_reason_is_bounded() -> None:
    error = make_record(status="error", score=None, label=None, error_type="Timeout", reason=None)
    scored = make_record(score=0.2, label="fail", success=False, reason="x" * 10_000)
    for order in ([error, scored], [scored, error]):
        out = score_attributes(order)
        assert out[score_key("faithfulness", "value")] == 0.2
        assert score_key("faithfulness", "error_type") not in out
        assert len(out[score_key("faithfulness", "reason")]) == MAX_REASON_CHARS
