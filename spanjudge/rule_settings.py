"""One rule as written in the worker's file (the ``[[rules]]`` tables of
:mod:`spanjudge.settings`); :mod:`spanjudge.worker.rule_config` builds the
:class:`~spanjudge.Rule` from it.

Every key but ``metric``, ``params``, ``filter`` and ``build_case`` is a field of
:class:`~spanjudge.evaluators._plan.rules.RuleOptions`, declared once for the file and for
``Rule(...)`` in Python: the same names, defaults and bounds. Here the metric is named (and
built from ``params`` with the worker's judge), the filter is a table and ``build_case`` a
``"module:function"`` path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from spanjudge._core.kinds import MetricName
from spanjudge.evaluators._plan.rules import RuleOptions


class RuleConfig(RuleOptions):
    """One rule as written in the worker's file."""

    metric: MetricName = Field(
        description="A built-in metric; geval is criteria of your own (params: name, criteria "
        "or evaluation_steps, evaluation_params, threshold...), the conversational G-Eval on "
        "target conversation."
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
    build_case: str | None = Field(
        default=None,
        description='"module:function" building the test case from the spans, instead of the '
        "built-in rebuild.",
    )


def precision_targets(rules: Iterable[RuleConfig]) -> dict[str, float]:
    """Rule name -> ``target_half_width`` of the file's rules that state one: what
    ``scores --summary`` and the worker's ``under_covered`` gauge compare intervals with. A rule
    without a ``name`` is named ``<metric>-<target>`` (a ``geval`` rule: give it a name, its
    default one comes from its params)."""
    return {
        rule.name or f"{rule.metric}-{rule.target}": rule.target_half_width
        for rule in rules
        if rule.target_half_width is not None
    }
