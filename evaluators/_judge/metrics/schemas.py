"""What crosses a metric's edges: the judge answer every metric shares (:class:`Reason`), the
count check metrics put on verdict lists (:func:`expect_count`), and a metric's outcome on one case
as stores, spans and reports read it (:class:`MetricData`), with its bounds: a score is a finite
number in [0, 1] (:func:`checked_score`), a reason or error text at most
:data:`MAX_REASON_CHARS` characters (:func:`bounded_text`)::

    bounded_text("x" * 10_000_000)[-40:]   # '... [cut: 10,000,000 characters, 4,000 kept]'
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from spanjudge.errors import MetricError

M = TypeVar("M", bound=BaseModel)

MAX_REASON_CHARS = 4000
"""The longest reason (or error text) a result keeps; a longer one is cut and says so. A judge
may answer megabytes; results go into stores, span attributes and events downstream."""

INVALID_SCORE = "invalid_score"
"""``error_type`` of a metric whose score came out non-finite or outside [0, 1]."""


def bounded_text(text: str | None, limit: int = MAX_REASON_CHARS) -> str | None:
    """``text`` if it is at most ``limit`` characters, else its start and a marker saying how
    long it was, ``limit`` characters in all."""
    if text is None or len(text) <= limit:
        return text
    marker = f" [cut: {len(text):,} characters, {limit:,} kept]"
    return text[: max(limit - len(marker), 0)] + marker


def checked_score(metric: str, score: Any) -> float:
    """``score`` as a float when it is a finite number in [0, 1]; else a :class:`MetricError`
    (``error_type`` :data:`INVALID_SCORE`): never a NaN, an infinity or a 1.2 stored."""
    number = isinstance(score, (int, float)) and not isinstance(score, bool)
    value = float(score) if number else math.nan
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise MetricError(
            metric, INVALID_SCORE, f"the score must be a finite number from 0 to 1, got {score!r}"
        )
    return value


class MetricData(BaseModel):
    """One metric's outcome on one case, as it crosses into stores, spans and reports.

    ``score`` is ``None`` whenever ``error`` is set: a failed evaluation is never a 0 or a 1.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    score: float | None = None
    threshold: float
    success: bool | None = None
    reason: str | None = None
    error: str | None = None
    error_type: str | None = None
    strict_mode: bool = False
    judge_model: str | None = None
    evaluation_cost: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    judge_calls: int = 0
    verdicts: list[dict[str, Any]] = Field(default_factory=list)
    duration_seconds: float | None = None

    @field_validator("reason", "error")
    @classmethod
    def _bounded(cls, text: str | None) -> str | None:
        return bounded_text(text)


class Reason(BaseModel):
    """Judge answer of every metric's reason step."""

    reason: str


@lru_cache(maxsize=512)
def expect_count(schema: type[M], field: str, count: int) -> type[M]:
    """``schema`` plus a check that ``field`` holds exactly ``count`` items.

    A verdict list whose length differs from the claims asked about cannot be aligned with
    them, so it must count as invalid output and go through the judge's repair-or-retry. The
    check is a validator, not ``minItems``/``maxItems``, so the JSON schema sent to the model
    (and its name, which scripted judges match on) stays the same.
    """

    def _check(obj: Any) -> Any:
        got = len(getattr(obj, field))
        if got != count:
            raise ValueError(
                f"expected exactly {count} {field} (one per item, in the given order), got {got}"
            )
        return obj

    def _bounds(json_schema: dict[str, Any]) -> None:
        # said in the JSON schema too: constrained decoding (llama.cpp, vLLM) then emits the
        # right count, which small models otherwise miss
        prop = json_schema.get("properties", {}).get(field)
        if isinstance(prop, dict):
            prop["minItems"] = prop["maxItems"] = count

    validators: dict[str, Any] = {"_check_count": model_validator(mode="after")(_check)}
    model: type[M] = create_model(
        schema.__name__,
        __base__=schema,
        __module__=schema.__module__,
        __validators__=validators,
    )
    model.model_config["json_schema_extra"] = _bounds
    model.model_rebuild(force=True)
    return model
