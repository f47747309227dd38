"""Rules that select by the tree (issue 28 item 4): filters on the target's trajectory, in Python
and in TOML, validated with errors naming the key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.trajectory_checks import ToolErrorCheck
from spanjudge.evaluators._plan.rules import Rule, SpanFilter
from spanjudge.evaluators._plan.trajectory_filter import TrajectoryFilter
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import (
    conversation_target,
    find_targets,
    target_tree,
)
from spanjudge.evaluators._rebuild.trajectory import trajectory_of
from spanjudge.settings import load_settings
from spanjudge.worker.rule_config import build_rules
from tests.evaluators.online.spans import Trace


def turn(
    tools: tuple[str, ...] = ("search",),
    models: int = 1,
    fail: str | None = None,
    sub_agent: str | None = None,
    conversation_id: str | None = None,
) -> tuple[list[SpanRecord], SpanRecord]:
    t = Trace()
    top = t.agent("support", conversation_id=conversation_id)
    for _ in range(models):
        t.llm(parent=top)
    for name in tools:
        span = t.tool(name, {"q": name}, parent=top)
        if name == fail:
            span.status_code = "ERROR"
    if sub_agent:
        t.agent(sub_agent, parent=top)
    return t.spans, top


def passes(flt: Any, spans: list[SpanRecord], span: SpanRecord) -> bool:
    rule = Rule(ToolErrorCheck(), target="agent", filter=flt)
    return rule.matches_span(span, target_tree(spans))


@pytest.mark.parametrize(
    ("conditions", "kwargs", "expected"),
    [
        ({"min_tool_calls": 2}, {"tools": ("search", "lookup")}, True),
        ({"min_tool_calls": 2}, {"tools": ("search",)}, False),
        ({"min_model_calls": 4}, {"models": 3}, False),
        ({"min_model_calls": 3}, {"models": 3}, True),
        ({"min_steps": 3}, {"models": 1, "tools": ("a", "b")}, True),
        ({"tool": "look*"}, {"tools": ("search", "lookup_order")}, True),
        ({"tool": "look*"}, {"tools": ("search",)}, False),
        ({"agent": "billing"}, {"sub_agent": "billing"}, True),
        ({"agent": "support"}, {}, True),
        ({"agent": "billing"}, {}, False),
        ({"tool_error": True}, {"fail": "search"}, True),
        ({"tool_error": True}, {}, False),
        ({"tool_error": False}, {}, True),
        ({"handoff": True}, {"sub_agent": "billing"}, False),  # a sub-agent, not a hand-off
        ({"handoff": False}, {}, True),
        ({"min_tool_calls": 1, "tool_error": True}, {"fail": "search"}, True),
        ({"min_tool_calls": 2, "tool_error": True}, {"fail": "search"}, False),
    ],
)
def test_trajectory_conditions(conditions: dict[str, Any], kwargs: Any, expected: bool) -> None:
    spans, top = turn(**kwargs)
    assert passes(TrajectoryFilter(**conditions), spans, top) is expected
    assert passes({"trajectory": conditions}, spans, top) is expected


def test_a_handoff_between_sibling_agents_is_seen() -> None:
    t = Trace()
    root = t.span("workflow", None, {})
    t.agent("triage", parent=root)
    t.agent("billing", parent=root)
    tree = SpanTree(t.spans)
    assert TrajectoryFilter(handoff=True).matches(trajectory_of(tree, root))
    assert TrajectoryFilter(agent="billing").matches(trajectory_of(tree, root))


def test_span_conditions_and_trajectory_conditions_both_hold() -> None:
    spans, top = turn(tools=("search", "lookup"))
    both = {"service": "shop", "trajectory": {"min_tool_calls": 2}}
    assert passes(both, spans, top)
    assert not passes({**both, "service": "other"}, spans, top)


def test_without_the_tree_the_trajectory_is_the_span_alone() -> None:
    spans, top = turn(tools=("search", "lookup"))
    rule = Rule(ToolErrorCheck(), target="agent", filter=TrajectoryFilter(min_tool_calls=1))
    assert rule.matches_span(top, target_tree(spans))
    assert not rule.matches_span(top)


def test_a_conversation_passes_when_any_turn_does() -> None:
    t = Trace()
    quiet = t.agent(conversation_id="c")
    t.llm(parent=quiet)
    busy = t.agent(conversation_id="c")
    t.tool("search", {"q": 1}, parent=busy)
    target = conversation_target("c", t.spans)
    assert target is not None
    rule = Rule(ToolErrorCheck(), target="agent", filter={"trajectory": {"tool": "search"}})
    assert rule.matches(target, target_tree(t.spans))
    assert not Rule(
        ToolErrorCheck(), target="agent", filter={"trajectory": {"tool": "refund"}}
    ).matches(target, target_tree(t.spans))


def test_planning_finds_only_the_targets_the_trajectory_filter_passes() -> None:
    spans, top = turn(tools=("search",))
    found = Rule(ToolErrorCheck(), target="agent", filter={"trajectory": {"tool": "search"}})
    assert [t.span_id for t in find_targets(found, spans)] == [top.span_id]
    other = Rule(ToolErrorCheck(), target="agent", filter={"trajectory": {"tool": "refund"}})
    assert find_targets(other, spans) == []


def test_rule_targets_found_with_the_tree_honour_the_filter() -> None:
    spans, top = turn(tools=("search",))
    rule = Rule(ToolErrorCheck(), target="agent", filter={"trajectory": {"tool": "search"}})
    targets = find_targets(rule, spans, apply_filter=False)
    tree = target_tree(spans)
    assert [t.span_id for t in targets if rule.matches(t, tree)] == [top.span_id]


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"min_tools": 2}, "unknown filter.trajectory key(s) 'min_tools'; known: agent, handoff"),
        ({"min_tool_calls": -1}, "filter.trajectory.min_tool_calls must be a non-negative"),
        ({"min_model_calls": "3"}, "filter.trajectory.min_model_calls must be a non-negative"),
        ({"tool_error": "yes"}, "filter.trajectory.tool_error must be true or false"),
        ({"handoff": 1}, "filter.trajectory.handoff must be true or false"),
        ({"tool": 3}, "filter.trajectory.tool must be a string (glob)"),
    ],
)
def test_bad_conditions_name_the_key(conditions: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"Rule.filter: {message}")):
        Rule(ToolErrorCheck(), target="agent", filter={"trajectory": conditions})


def test_a_trajectory_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"filter\.trajectory must be a mapping"):
        SpanFilter(trajectory=3)  # type: ignore[arg-type]


def test_toml_rules_take_trajectory_filters(tmp_path: Path) -> None:
    config = tmp_path / "spanjudge.toml"
    config.write_text(
        "[[rules]]\n"
        'metric = "faithfulness"\n'
        'target = "agent"\n'
        'filter = { service = "shop", trajectory = { tool = "search*", tool_error = true } }\n'
    )
    settings = load_settings(config, store_url="sqlite:///:memory:")
    [rule] = build_rules(settings, None)
    assert isinstance(rule.filter, SpanFilter)
    assert rule.filter.trajectory == TrajectoryFilter(tool="search*", tool_error=True)


def test_toml_errors_name_the_rule_and_key(tmp_path: Path) -> None:
    config = tmp_path / "spanjudge.toml"
    config.write_text(
        '[[rules]]\nmetric = "faithfulness"\ntarget = "agent"\n'
        "filter = { trajectory = { min_tool_call = 2 } }\n"
    )
    settings = load_settings(config, store_url="sqlite:///:memory:")
    with pytest.raises(ConfigError, match=r"rules\.0\.filter: unknown filter\.trajectory key"):
        build_rules(settings, None)
