"""Fixtures for the score emitter and telemetry tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spanjudge._core.span_record import EvaluationRecord
from tests.support.otlp_sink import OtlpSink

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


def make_record(**overrides: object) -> EvaluationRecord:
    """A scored faithfulness record on one LLM span; override any field."""
    fields: dict[str, object] = dict(
        rule="faithfulness-llm",
        metric="faithfulness",
        target_type="llm",
        target_id=SPAN_ID,
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
        status="scored",
        score=0.75,
        label="pass",
        success=True,
        threshold=0.5,
        reason="3 of 4 claims are supported by the context",
        judge_model="gpt-4o-mini",
        input_tokens=120,
        output_tokens=30,
        cost=0.0021,
        judge_calls=2,
        verdicts=[{"verdict": "yes", "reason": "stated in doc 1"}],
        sample_rate=0.25,
        service_name="support-bot",
        target_end_unix_nano=1_700_000_000_000_000_000,
        started_at=1_700_000_010.0,
        finished_at=1_700_000_012.5,
    )
    fields.update(overrides)
    return EvaluationRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as running:
        yield running
