"""Deterministic checks of an agent's trajectory: no judge call, no cost, the same answer every
time. Each reads ``case.trajectory`` (a
:class:`~spanjudge.evaluators._rebuild.trajectory.Trajectory`), scores 1.0 when the
trajectory passes and 0.0 when it does not, and gives a reason naming the step(s):

* :class:`ToolErrorCheck`: more tool calls failed than ``max_errors`` (default 0);
* :class:`RepeatedCallCheck`: one tool called with the same arguments ``max_repeats`` times
  or more (default 3): the agent is looping;
* :class:`StepLimitCheck`: more than ``max_steps`` steps (of one ``kind``, or all).

They have the metric shape rules use (``name``, ``required_fields``, ``missing_fields``,
``a_measure``, ``score``/``reason``/``success``, ``to_data``), so they run online like any other::

    Rule(RepeatedCallCheck(max_repeats=3), target="agent")

    check = ToolErrorCheck()
    check.measure(case)          # 0.0
    check.reason                 # "1 tool error(s), 0 allowed: step 1 tool_call lookup_order ..."
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from spanjudge.errors import ConfigError, MissingFieldError
from spanjudge.evaluators._judge.metrics.outcome import Outcome
from spanjudge.evaluators._judge.metrics.schemas import MetricData
from spanjudge.evaluators._judge.test_case import LLMTestCase

__all__ = ["RepeatedCallCheck", "StepLimitCheck", "ToolErrorCheck", "TrajectoryCheck"]

_SHOWN_STEPS = 10  # steps named in a reason; the verdicts list every one


class TrajectoryCheck(Outcome):
    """Shared shape of the deterministic checks: subclasses implement :meth:`_check`,
    returning ``(passed, reason, verdicts)``. No judge: ``evaluation_model`` is ``None`` and
    there is no judge-cache identity (the answer is cheaper than the lookup). Each check takes
    a ``model`` keyword and ignores it, so rules built from settings (which pass the worker's
    judge to every metric) build checks too."""

    conversational: ClassVar[bool] = False
    required_fields: ClassVar[tuple[str, ...]] = ("trajectory",)
    higher_is_better: ClassVar[bool] = True

    # results of the last run besides the Outcome's (deepeval's attribute names)
    verdicts: list[dict[str, Any]]
    evaluation_cost: float | None
    input_tokens: int
    output_tokens: int
    judge_calls: int

    def __init__(self) -> None:
        self.threshold = 1.0
        self.strict_mode = False
        self.evaluation_model: str | None = None
        self._reset()

    @property
    def __name__(self) -> str:
        return self.display_name

    def _config(self) -> dict[str, Any]:
        return {}

    def clone(self) -> TrajectoryCheck:
        """A fresh instance with the same configuration."""
        return type(self)(**self._config())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({args})"

    def missing_fields(self, test_case: Any) -> list[str]:
        """``["trajectory"]`` unless ``test_case`` is an LLM case carrying one."""
        if not isinstance(test_case, LLMTestCase) or test_case.trajectory is None:
            return ["trajectory"]
        return []

    async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        """Check ``test_case.trajectory`` and return the score (1.0 passed, 0.0 failed)."""
        self._reset()
        started = time.perf_counter()
        try:
            missing = self.missing_fields(test_case)
            if missing:
                raise MissingFieldError(self.display_name, missing)
            passed, reason, verdicts = self._check(test_case.trajectory)
            score = 1.0 if passed else 0.0
            self.score, self.success, self.reason, self.verdicts = score, passed, reason, verdicts
            return score
        except Exception as exc:  # a trajectory built by hand with odd values: an error, not 0
            failure = self._failure(exc)
            if failure is exc:
                raise
            raise failure from exc
        finally:
            self.duration_seconds = time.perf_counter() - started

    def to_data(self) -> MetricData:
        return self._outcome_data(verdicts=self.verdicts)

    def _check(self, trajectory: Any) -> tuple[bool, str, list[dict[str, Any]]]:
        raise NotImplementedError

    def _reset(self) -> None:
        self._clear_outcome()
        self.verdicts = []
        self.evaluation_cost = None
        self.input_tokens = self.output_tokens = self.judge_calls = 0


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _named(steps: Sequence[Any]) -> str:
    shown = "; ".join(step.describe() for step in steps[:_SHOWN_STEPS])
    more = len(steps) - _SHOWN_STEPS
    return shown + (f"; and {more} more" if more > 0 else "")


class ToolErrorCheck(TrajectoryCheck):
    """Fails when more than ``max_errors`` tool calls ended in an error (span status ERROR,
    ``error.type``, an exception event, a tool status of ``error``).

    Example::

        ToolErrorCheck(max_errors=0).measure(case)  # 0.0 when any tool call failed
    """

    name = "tool_errors"
    display_name = "Tool Errors"

    def __init__(self, max_errors: int = 0, model: Any = None) -> None:
        self.max_errors = _count(max_errors, "max_errors")
        super().__init__()

    def _config(self) -> dict[str, Any]:
        return {"max_errors": self.max_errors}

    def _check(self, trajectory: Any) -> tuple[bool, str, list[dict[str, Any]]]:
        failed = trajectory.tool_errors
        verdicts = [{"step": s.index, "tool": s.name, "error": s.error} for s in failed]
        calls = len(trajectory.tool_calls)
        if not failed:
            return True, f"no tool error in {calls} tool call(s)", verdicts
        head = f"{len(failed)} of {calls} tool call(s) failed, {self.max_errors} allowed"
        return len(failed) <= self.max_errors, f"{head}: {_named(failed)}", verdicts


class RepeatedCallCheck(TrajectoryCheck):
    """Fails when one tool is called with the same arguments ``max_repeats`` times or more in
    the trajectory: a loop. Tool executions are compared; a trajectory without tool spans
    compares the calls its model calls requested.

    Example::

        RepeatedCallCheck(max_repeats=3).measure(case)  # 0.0 if search({"q": "x"}) ran 3 times
    """

    name = "repeated_tool_calls"
    display_name = "Repeated Tool Calls"

    def __init__(self, max_repeats: int = 3, model: Any = None) -> None:
        self.max_repeats = _count(max_repeats, "max_repeats")
        if self.max_repeats < 2:
            raise ConfigError(f"max_repeats must be at least 2, got {max_repeats!r}")
        super().__init__()

    def _config(self) -> dict[str, Any]:
        return {"max_repeats": self.max_repeats}

    def _check(self, trajectory: Any) -> tuple[bool, str, list[dict[str, Any]]]:
        # (step, tool, arguments, hidden): arguments not recorded (content capture off) are
        # unknown, not equal, so such calls are never counted as repeats of each other
        calls = [
            (s.index, s.name, s.arguments, bool(getattr(s, "arguments_hidden", False)))
            for s in trajectory.tool_calls
        ]
        if not calls:  # a model's request always carries its arguments unless they were hidden
            calls = [
                (s.index, c.name, c.arguments, c.arguments is None)
                for s in trajectory.model_calls
                for c in s.tool_calls
            ]
        seen: dict[tuple[str, str], list[int]] = {}
        hidden = 0
        for index, name, arguments, unknown in calls:
            if unknown:
                hidden += 1
                continue
            seen.setdefault((name, _canonical(arguments)), []).append(index)
        loops = [(k, v) for k, v in seen.items() if len(v) >= self.max_repeats]
        verdicts = [
            {"tool": name, "arguments": args, "steps": steps, "times": len(steps)}
            for (name, args), steps in loops
        ]
        unseen = (
            f"; {hidden} call(s) with hidden arguments (content capture off) not compared"
            if hidden
            else ""
        )
        if not loops:
            most = max((len(v) for v in seen.values()), default=0)
            return (
                True,
                f"no call repeated {self.max_repeats} times (most: {most}){unseen}",
                verdicts,
            )
        parts = [
            f"{name} {_clip(args)} called {len(steps)} times (steps {_indices(steps)})"
            for (name, args), steps in loops
        ]
        return (
            False,
            f"repeated identical calls, limit {self.max_repeats}: " + "; ".join(parts) + unseen,
            verdicts,
        )


class StepLimitCheck(TrajectoryCheck):
    """Fails when the trajectory has more than ``max_steps`` steps; ``kind`` counts one kind
    only (``"model_call"``, ``"tool_call"``, ``"retrieval"``, ``"agent"``, ``"handoff"``,
    ``"plan"``). Steps past the reader's limit count too.

    Example::

        StepLimitCheck(max_steps=10, kind="model_call").measure(case)
    """

    name = "step_limit"
    display_name = "Step Limit"
    KINDS: ClassVar[tuple[str, ...]] = (
        "model_call",
        "tool_call",
        "retrieval",
        "agent",
        "handoff",
        "plan",
    )

    def __init__(self, max_steps: int = 25, kind: str | None = None, model: Any = None) -> None:
        self.max_steps = _count(max_steps, "max_steps")
        if kind is not None and kind not in self.KINDS:
            raise ConfigError(f"kind must be one of {', '.join(self.KINDS)} or None, got {kind!r}")
        self.kind = kind
        super().__init__()

    def _config(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "kind": self.kind}

    def _check(self, trajectory: Any) -> tuple[bool, str, list[dict[str, Any]]]:
        steps = [s for s in trajectory.steps if self.kind is None or s.kind == self.kind]
        total = len(steps) + (trajectory.steps_dropped if self.kind is None else 0)
        what = f"{self.kind} steps" if self.kind else "steps"
        if total <= self.max_steps:
            return True, f"{total} {what}, limit {self.max_steps}", []
        over = steps[self.max_steps :]
        verdicts = [{"step": s.index, "kind": s.kind, "name": s.name} for s in over]
        first = over[0].describe() if over else f"{trajectory.steps_dropped} dropped steps"
        return (
            False,
            f"{total} {what}, over the limit of {self.max_steps}; the first over: {first}",
            verdicts,
        )


def _canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _indices(steps: list[int]) -> str:
    shown = ", ".join(map(str, steps[:_SHOWN_STEPS]))
    return shown + (", ..." if len(steps) > _SHOWN_STEPS else "")


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
