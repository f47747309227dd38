"""Rules that select by the tree: :class:`TrajectoryFilter`, conditions on what the target's
agent did (its :class:`~spanjudge.evaluators._rebuild.trajectory.Trajectory`), not on
the target span's own attributes.

Given as ``Rule(filter=TrajectoryFilter(...))``, or inside a span filter under the key
``trajectory`` (in TOML too)::

    Rule(ToolErrorCheck(), target="agent", filter=TrajectoryFilter(min_tool_calls=2))
    Rule(metric, target="agent", filter={"service": "shop", "trajectory": {"tool": "search*"}})

.. code-block:: toml

    [[rules]]
    metric = "faithfulness"
    target = "agent"
    filter = { service = "shop", trajectory = { tool_error = true, min_model_calls = 3 } }

The trajectory is read from the span tree of the target's trace (a conversation: of each turn;
any turn matching lets the conversation through).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, fields
from fnmatch import fnmatchcase
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.errors import ConfigError
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.trajectory import Trajectory, trajectory_of

__all__ = ["TrajectoryFilter", "trajectory_in"]

_COUNTS = ("min_tool_calls", "min_model_calls", "min_steps")
_GLOBS = ("tool", "agent")
_FLAGS = ("tool_error", "handoff")


@dataclass(slots=True)
class TrajectoryFilter:
    """Conditions on the target's trajectory; every condition given must hold.

    * ``min_tool_calls`` / ``min_model_calls`` / ``min_steps``: at least that many tool
      executions, model calls, steps of any kind ("more than 3 model calls" is
      ``min_model_calls=4``);
    * ``tool``: a tool with a matching name was called (a glob, as in :class:`SpanFilter`);
    * ``agent``: an agent with a matching name took part (the turn's, a sub-agent's, a
      hand-off's);
    * ``tool_error``: ``True``: some tool call failed; ``False``: none did;
    * ``handoff``: ``True``: control passed between agents; ``False``: it did not.

    Example::

        TrajectoryFilter(min_tool_calls=2, tool="search*", tool_error=True)
        TrajectoryFilter.from_dict({"handoff": True})
    """

    min_tool_calls: int | None = None
    min_model_calls: int | None = None
    min_steps: int | None = None
    tool: str | None = None
    agent: str | None = None
    tool_error: bool | None = None
    handoff: bool | None = None

    def __post_init__(self) -> None:
        for name in _COUNTS:
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigError(
                    f"filter.trajectory.{name} must be a non-negative integer, got {value!r}"
                )
        for name in _GLOBS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(
                    f"filter.trajectory.{name} must be a string (glob), got {value!r}"
                )
        for name in _FLAGS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"filter.trajectory.{name} must be true or false, got {value!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrajectoryFilter:
        """Build from a config mapping with the same keys; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"filter.trajectory must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown filter.trajectory key(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
        return cls(**{k: v for k, v in data.items() if v is not None})

    def matches(self, trajectory: Trajectory) -> bool:
        """Whether ``trajectory`` meets every condition."""
        t = trajectory
        if self.min_tool_calls is not None and len(t.tool_calls) < self.min_tool_calls:
            return False
        if self.min_model_calls is not None and len(t.model_calls) < self.min_model_calls:
            return False
        if self.min_steps is not None and len(t.steps) + t.steps_dropped < self.min_steps:
            return False
        if self.tool is not None and not any(fnmatchcase(s.name, self.tool) for s in t.tool_calls):
            return False
        if self.agent is not None and not any(fnmatchcase(n, self.agent) for n in t.agents):
            return False
        if self.tool_error is not None and bool(t.tool_errors) != self.tool_error:
            return False
        return self.handoff is None or bool(t.handoffs) == self.handoff


# One planning pass asks every rule about the same targets: read each trajectory once per tree.
_READ: weakref.WeakKeyDictionary[SpanTree, dict[tuple[str, str], Trajectory]] = (
    weakref.WeakKeyDictionary()
)


def trajectory_in(tree: SpanTree | None, span: SpanRecord) -> Trajectory:
    """``span``'s trajectory in ``tree`` (read once per tree); without a tree, the span alone."""
    if tree is None:
        return trajectory_of(SpanTree([span]), span)
    seen = _READ.setdefault(tree, {})
    at = (span.trace_id, span.span_id)
    if at not in seen:
        seen[at] = trajectory_of(tree, span)
    return seen[at]
