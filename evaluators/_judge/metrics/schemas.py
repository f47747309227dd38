"""What crosses a metric's edges: the judge answer every metric shares (:class:`Reason`), the
count check metrics put on verdict lists (:func:`expect_count`), and a metric's outcome on one case
as stores, spans and reports read it (:class:`MetricData`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

M = TypeVar("M", bound=BaseModel)


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
