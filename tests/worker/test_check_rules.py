"""The trajectory checks are metrics of the worker file like the judged ones: named in a rule,
their parameters checked, no judge needed."""

from __future__ import annotations

import pytest

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.trajectory_checks import (
    RepeatedCallCheck,
    StepLimitCheck,
    ToolErrorCheck,
)
from spanjudge.settings import load_settings
from spanjudge.worker.rule_config import build_rule


@pytest.mark.parametrize(
    ("metric", "params", "cls"),
    [
        ("tool_errors", {"max_errors": 1}, ToolErrorCheck),
        ("repeated_tool_calls", {"max_repeats": 2}, RepeatedCallCheck),
        ("step_limit", {}, StepLimitCheck),
    ],
)
def test_a_check_is_a_rule_metric_by_name(metric: str, params: dict[str, int], cls: type) -> None:
    settings = load_settings(
        None,
        store_url="sqlite:///:memory:",
        judge_model="openai/x",
        rules=[{"metric": metric, "target": "agent", "params": params}],
    )
    rule = build_rule(settings.rules[0], object(), 0)
    assert isinstance(rule.metric, cls)
    assert rule.name == f"{metric}-agent"


def test_an_unknown_check_parameter_names_its_key() -> None:
    settings = load_settings(
        None,
        store_url="sqlite:///:memory:",
        judge_model="openai/x",
        rules=[{"metric": "tool_errors", "target": "agent", "params": {"max_error": 1}}],
    )
    with pytest.raises(ConfigError, match=r"rules\.0\.params\.max_error: unknown parameter"):
        build_rule(settings.rules[0], object(), 0)
