"""One rule as written in the worker's file (the ``[[rules]]`` tables of
:mod:`spanjudge.settings`); :mod:`spanjudge.worker.rule_config` builds the
:class:`~spanjudge.Rule` from it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spanjudge._core.kinds import MetricName, TargetType


class RuleConfig(BaseModel):
    """One rule as written in the worker's file."""

    model_config = ConfigDict(extra="forbid")

    metric: MetricName = Field(
        description="A built-in metric; geval is criteria of your own (params: name, criteria "
        "or evaluation_steps, evaluation_params, threshold...), the conversational G-Eval on "
        "target conversation."
    )
    target: TargetType = Field(
        default="llm",
        description="What is evaluated: each llm or agent span, a whole trace, or the turns of "
        "a conversation.",
    )
    sample_rate: float = Field(
        default=1.0, ge=0.0, le=1.0, description="Share of targets evaluated (stable per target)."
    )
    name: str | None = Field(
        default=None, description="The rule's stable id; unset: <metric>-<target>."
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the metric (threshold...)."
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description="Conditions on the target span: span_name, service, agent, model (globs), "
        "attributes, attributes_exist; trajectory: a table of conditions on what the agent did "
        "(min_tool_calls, min_model_calls, min_steps, tool, agent, tool_error, handoff).",
    )
    max_per_minute: int | None = Field(
        default=None, gt=0, description="Budget: evaluations per minute; the rest is skipped."
    )
    max_cost_per_day: float | None = Field(
        default=None, gt=0, description="Budget: judge cost (USD) per day; the rest is skipped."
    )
    segment_keys: list[str] = Field(
        default_factory=list, description="Span attributes its results are also grouped by."
    )
    budget_per_day: float | None = Field(
        default=None, gt=0, description="Target: evaluations per day, spread over segments."
    )
    budget_cost_per_day: float | None = Field(
        default=None, gt=0, description="Target: judge cost (USD) per day, spread over segments."
    )
    target_half_width: float | None = Field(
        default=None, gt=0, lt=0.5, description="Target: pass-rate interval half-width per segment."
    )
    allocate_by: str = Field(default="service", description="The segment key targets spread over.")
    risk_sample_rate: float = Field(
        default=1.0, ge=0.0, le=1.0, description="Under a target: least rate of a risky target."
    )
    sample_by: Literal["target", "trace", "conversation"] = Field(
        default="target",
        description="What the sample decision is keyed on: target (a hash per rule), trace "
        "(OpenTelemetry consistent sampling, as a Collector or SDK sampler decides) or "
        "conversation (whole conversations).",
    )
    build_case: str | None = Field(
        default=None,
        description='"module:function" building the test case from the spans, instead of the '
        "built-in rebuild.",
    )
    inferred_fields: bool = Field(
        default=True,
        description="false: score only cases whose required fields a dialect read; skip those "
        "an inference rule filled (an inferred turn or retrieval, a generic model call).",
    )
