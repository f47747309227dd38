"""The closed vocabularies of spanjudge, each a ``Literal`` type spelled once.

Records, rules, the worker's settings and the telemetry labels annotate with these types, so a
user's type checker rejects ``Rule(m, target="llmm")``; the run-time checks and their error
messages read the same values back with :func:`typing.get_args` (the tuples below), so the two
cannot drift apart. This module sits in the lowest layer that stores them (``exporters``): every
layer above may import it.

Example::

    from spanjudge._core.kinds import TARGET_TYPES, TargetType

    def describe(target: TargetType) -> str:
        return f"one of {', '.join(TARGET_TYPES)}"
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "FEEDBACK_SOURCES",
    "LABELS",
    "METRIC_NAMES",
    "NAMED_METRICS",
    "OUTCOMES",
    "OUTPUTS",
    "SINKS",
    "STATUSES",
    "TARGET_TYPES",
    "FeedbackSource",
    "Label",
    "MetricName",
    "Outcome",
    "Output",
    "Sink",
    "Status",
    "TargetType",
]

# What a rule evaluates: each llm / agent span, a whole trace (at its root span), or the agent
# turns sharing gen_ai.conversation.id.
TargetType = Literal["llm", "agent", "trace", "conversation"]
TARGET_TYPES: Final[tuple[TargetType, ...]] = get_args(TargetType)

# The built-in metrics a worker rule names (``[[rules]] metric = ...``). "geval" is criteria of
# your own; on target "conversation" it is the conversational G-Eval.
MetricName = Literal[
    "faithfulness",
    "bias",
    "topic_adherence",
    "geval",
    "tool_errors",
    "repeated_tool_calls",
    "step_limit",
    # judged metrics of an agent's trajectory (targets agent and trace; goal_accuracy:
    # conversation)
    "task_completion",
    "tool_correctness",
    "argument_correctness",
    "step_efficiency",
    "plan_adherence",
    "plan_quality",
    "goal_accuracy",
]
METRIC_NAMES: Final[tuple[MetricName, ...]] = get_args(MetricName)
# The built-in metrics whose results carry that very name; a G-Eval result carries the name its
# user gave it, so "geval" is never the name of a stored result.
NAMED_METRICS: Final[tuple[MetricName, ...]] = tuple(m for m in METRIC_NAMES if m != "geval")

# An evaluation's status: "scored" (score and label set), "skipped" (no judge call, a reason
# set) or "error" (no score: never shown as 0 or 1).
Status = Literal["scored", "skipped", "error"]
STATUSES: Final[tuple[Status, ...]] = get_args(Status)

# The verdict of a scored evaluation, and of a person's label.
Label = Literal["pass", "fail"]
LABELS: Final[tuple[Label, ...]] = get_args(Label)

# The ``label`` of the evaluations counter: the verdict, or why there is none.
Outcome = Literal["pass", "fail", "error", "skipped"]
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)

# How a result leaves: an evaluation span (/v1/traces) and/or a gen_ai.evaluation.result log
# event (/v1/logs).
Output = Literal["span", "event"]
OUTPUTS: Final[tuple[Output, ...]] = get_args(Output)

# A result written as a product's own annotation beside the OTLP outputs: a Phoenix span/trace
# annotation, an MLflow feedback assessment (exporters/_sinks).
Sink = Literal["phoenix", "mlflow"]
SINKS: Final[tuple[Sink, ...]] = get_args(Sink)

# Where a person's label came from: spanjudge.feedback(), POST /v1/feedback, spanjudge feedback.
FeedbackSource = Literal["python", "http", "cli"]
FEEDBACK_SOURCES: Final[tuple[FeedbackSource, ...]] = get_args(FeedbackSource)
