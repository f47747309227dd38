"""The judge's answers for the judged agent metrics: one structured answer per metric (per unit
interaction for Goal Accuracy), holding the score or verdicts, the reason and the steps that
cost points, so no metric needs a second call for its reason.

Scores are checked to lie in [0, 1] and verdicts to be ``yes``/``no`` (case and spaces
forgiven); an answer that breaks this is invalid output and goes through the judge's
repair-or-retry like malformed JSON::

    TaskCompletionVerdict.model_validate({"task": "t", "outcome": "o", "verdict": 1.5})
    # ValidationError: verdict must be <= 1
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

__all__ = [
    "ArgumentVerdict",
    "ArgumentVerdicts",
    "GoalAccuracyVerdict",
    "PlanAdherenceVerdict",
    "PlanQualityVerdict",
    "StepEfficiencyVerdict",
    "TaskCompletionVerdict",
    "ToolSelectionVerdict",
    "ToolSelectionVerdicts",
]

_STEPS_DOC = "indices of the steps that cost points (empty when none did)"


def _steps(value: Any) -> Any:
    # a judge may write "3" or "step 3"; keep what reads as an index, drop the rest
    if not isinstance(value, list):
        return value
    found = []
    for item in value:
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            found.append(item)
        elif isinstance(item, str):
            digits = "".join(ch for ch in item if ch.isdigit())
            if digits:
                found.append(int(digits))
    return found


class _Scored(BaseModel):
    reason: str = ""
    steps: list[int] = Field(default_factory=list, description=_STEPS_DOC)

    @field_validator("steps", mode="before")
    @classmethod
    def _indices(cls, value: Any) -> Any:
        return _steps(value)


class TaskCompletionVerdict(_Scored):
    """The task as the judge understood it, the outcome it saw, and how far the outcome
    achieves the task (``verdict``, 0 to 1)."""

    task: str
    outcome: str
    verdict: float = Field(ge=0.0, le=1.0)


class StepEfficiencyVerdict(_Scored):
    """How directly the steps reach the task (1: no step wasted)."""

    task: str = ""
    score: float = Field(ge=0.0, le=1.0)


class PlanAdherenceVerdict(_Scored):
    """How closely the executed steps follow the plan."""

    score: float = Field(ge=0.0, le=1.0)


class PlanQualityVerdict(_Scored):
    """How good the plan is for the task (complete, ordered, feasible with the tools)."""

    score: float = Field(ge=0.0, le=1.0)


class _YesNo(BaseModel):
    step: int | None = None
    verdict: Literal["yes", "no"]
    reason: str | None = None

    @field_validator("verdict", mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class ToolSelectionVerdict(_YesNo):
    """Was this tool call the right choice for the task at that point (``yes``/``no``)."""


class ToolSelectionVerdicts(BaseModel):
    verdicts: list[ToolSelectionVerdict]
    reason: str = ""


class ArgumentVerdict(_YesNo):
    """Were this tool call's arguments right for the task at that point (``yes``/``no``)."""


class ArgumentVerdicts(BaseModel):
    verdicts: list[ArgumentVerdict]
    reason: str = ""


class GoalAccuracyVerdict(BaseModel):
    """One unit interaction of a conversation: the user's goal, how well the assistant reached
    it (``goal_score``) and how sound its way there was (``plan_score``)."""

    goal: str = ""
    goal_score: float = Field(ge=0.0, le=1.0)
    goal_reason: str = ""
    plan_score: float = Field(ge=0.0, le=1.0)
    plan_reason: str = ""
    steps: list[int] = Field(default_factory=list, description=_STEPS_DOC)

    @field_validator("steps", mode="before")
    @classmethod
    def _indices(cls, value: Any) -> Any:
        return _steps(value)
