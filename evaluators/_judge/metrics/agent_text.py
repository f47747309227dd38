"""How the judged agent metrics show an agent's trajectory to the judge: one rendering, shared by
every metric, bounded whatever the trajectory holds.

:func:`agent_view` turns a test case into an :class:`AgentView` (the case's ``trajectory`` when it
has one; otherwise a trajectory made of its ``input``, ``actual_output`` and ``tools_called``, so a
hand-written deepeval-style case works too). :func:`render_steps`, :func:`render_tools` and
:func:`render_task` write it as text for a prompt. Limits, each cut with a visible marker:

* at most :data:`MAX_RENDER_STEPS` steps: the first :data:`HEAD_STEPS` and the last ones, the
  middle replaced by ``[... N steps not shown (steps a to b) ...]``; steps the reader dropped
  (``steps_dropped``) are announced the same way;
* each argument, result, output or error at :data:`MAX_VALUE_CHARS` characters, less when many
  steps are shown (a fair share of the size limit, at least 80), so the last steps still fit;
* the task and the final output at :data:`MAX_TEXT_CHARS`; the tool list at :data:`MAX_TOOLS`;
* the whole step rendering at :data:`MAX_RENDER_CHARS`.

Only the steps shown are read, so a trajectory of 10,000 steps renders in the same time and
memory as one of 200::

    view = agent_view(LLMTestCase(input="Where is order 7?", actual_output="Shipped.",
                                  tools_called=[ToolCall(name="lookup_order")]))
    render_steps(view)  # '[step 0] tool_call lookup_order'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spanjudge.evaluators._judge.test_case import LLMTestCase, ToolCall, Turn

__all__ = [
    "HEAD_STEPS",
    "MAX_JUDGED_CALLS",
    "MAX_RENDER_CHARS",
    "MAX_RENDER_STEPS",
    "MAX_TEXT_CHARS",
    "MAX_TOOLS",
    "MAX_VALUE_CHARS",
    "AgentView",
    "CaseStep",
    "agent_view",
    "cut",
    "judged_calls",
    "render_calls",
    "render_steps",
    "render_task",
    "render_tools",
    "step_label",
    "turn_view",
]

MAX_RENDER_STEPS = 200
"""Steps shown to the judge; the rest are named by a marker."""
HEAD_STEPS = 150
"""Of the steps shown, how many from the start (the others from the end, where the outcome is)."""
MAX_VALUE_CHARS = 600
"""Characters of one argument, result, output or error in a prompt."""
MAX_TEXT_CHARS = 4_000
"""Characters of the task and of the final output in a prompt."""
MAX_TOOLS = 50
"""Tools listed as available (each description cut at 200 characters)."""
MAX_JUDGED_CALLS = 40
"""Tool calls given a verdict each (Tool and Argument Correctness); the first ones are judged."""
MAX_RENDER_CHARS = 60_000
"""Characters of the whole step rendering; past it, the remaining steps are a marker."""
_DESCRIPTION_CHARS = 200
_MIN_VALUE_CHARS = 80


@dataclass(slots=True)
class CaseStep:
    """A tool call of a hand-written case, with the attributes of a trajectory step."""

    index: int
    name: str
    arguments: Any = None
    result: Any = None
    kind: str = "tool_call"
    agent: str | None = None
    error: str | None = None
    tool_calls: list[Any] = field(default_factory=list)
    handoff_from: str | None = None
    handoff_to: str | None = None


@dataclass(slots=True)
class AgentView:
    """What a judged agent metric reads: the task, the steps (trajectory steps or
    :class:`CaseStep`), the tools offered, the final output, and what the reader left out."""

    task: str | None
    final_output: str | None
    steps: Sequence[Any]
    tools_available: Sequence[Any] = ()
    steps_dropped: int = 0
    notes: Sequence[str] = ()

    @property
    def tool_calls(self) -> list[Any]:
        return [s for s in self.steps if s.kind == "tool_call"]

    @property
    def plan_steps(self) -> list[Any]:
        return [s for s in self.steps if s.kind == "plan"]


def agent_view(case: LLMTestCase) -> AgentView:
    """The case's trajectory as an :class:`AgentView`; a case without one is read from its
    ``input``, ``actual_output`` and ``tools_called``. Blank text is ``None``."""
    trajectory = case.trajectory
    if trajectory is None:
        return AgentView(
            task=_text(case.input),
            final_output=_text(case.actual_output),
            steps=_case_steps(case.tools_called),
        )
    return AgentView(
        task=_text(getattr(trajectory, "task", None)) or _text(case.input),
        final_output=_text(getattr(trajectory, "final_output", None)) or _text(case.actual_output),
        steps=list(getattr(trajectory, "steps", None) or []),
        tools_available=list(getattr(trajectory, "tools_available", None) or []),
        steps_dropped=int(getattr(trajectory, "steps_dropped", 0) or 0),
        notes=list(getattr(trajectory, "notes", None) or []),
    )


def turn_view(turn: Turn) -> AgentView | None:
    """An assistant turn's trajectory (or its ``tools_called``) as a view; ``None`` when the
    turn holds neither."""
    trajectory = turn.trajectory
    if trajectory is not None:
        return AgentView(
            task=_text(getattr(trajectory, "task", None)),
            final_output=_text(getattr(trajectory, "final_output", None)) or _text(turn.content),
            steps=list(getattr(trajectory, "steps", None) or []),
            tools_available=list(getattr(trajectory, "tools_available", None) or []),
            steps_dropped=int(getattr(trajectory, "steps_dropped", 0) or 0),
        )
    if turn.tools_called:
        return AgentView(None, _text(turn.content), _case_steps(turn.tools_called))
    return None


# ---------------------------------------------------------------------------- rendering
def cut(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """``value`` as text (JSON for data), cut at ``limit`` characters with a visible marker."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[cut {len(text) - limit} chars]"


def judged_calls(view: AgentView) -> tuple[list[Any], int]:
    """The tool calls to give a verdict each (at most :data:`MAX_JUDGED_CALLS`) and how many
    there are. Tool executions; a trajectory without any (a framework that records no tool
    spans) offers the calls its model calls requested, as ``tool_request`` steps carrying the
    index of the model call."""
    calls: list[Any] = view.tool_calls
    if not calls:
        calls = [
            CaseStep(s.index, r.name, arguments=r.arguments, kind="tool_request", agent=s.agent)
            for s in view.steps
            if s.kind == "model_call"
            for r in (getattr(s, "tool_calls", None) or [])
        ]
    return calls[:MAX_JUDGED_CALLS], len(calls)


def render_calls(calls: Sequence[Any]) -> str:
    """The calls to judge, numbered in order, each with its step and arguments."""
    lines = []
    for number, call in enumerate(calls, start=1):
        line = f"{number}. [step {call.index}] {call.name}"
        if call.arguments is not None:
            line += " arguments: " + cut(call.arguments)
        lines.append(line)
    return "\n".join(lines)


def step_label(step: Any) -> str:
    """``step 3 (tool_call lookup_order)``: how a reason names a step."""
    return f"step {step.index} ({step.kind} {step.name})"


def render_task(view: AgentView, task: str | None = None) -> str:
    """The task (``task`` given to the metric wins over the one read from the trajectory)."""
    return cut(task or view.task or "(no task recorded)", MAX_TEXT_CHARS)


def render_tools(view: AgentView) -> str:
    """One line per available tool: ``- name: description``; ``(none recorded)`` without."""
    tools = list(view.tools_available[:MAX_TOOLS])
    if not tools:
        return "(none recorded)"
    lines = []
    for tool in tools:
        description = getattr(tool, "description", None)
        line = f"- {tool.name}"
        if description:
            line += ": " + cut(" ".join(str(description).split()), _DESCRIPTION_CHARS)
        parameters = getattr(tool, "parameters", None)
        if parameters:
            line += " parameters: " + cut(parameters, _DESCRIPTION_CHARS)
        lines.append(line)
    more = len(view.tools_available) - len(tools)
    if more > 0:
        lines.append(f"[... {more} more tools not shown]")
    return "\n".join(lines)


def render_steps(
    view: AgentView,
    steps: Sequence[Any] | None = None,
    *,
    final_output: bool = True,
) -> str:
    """The steps (all of the view's, or ``steps``), one block each, cut at the limits; with
    ``final_output`` the agent's final answer closes the rendering."""
    chosen = view.steps if steps is None else steps
    total = len(chosen)
    if total > MAX_RENDER_STEPS:
        tail = MAX_RENDER_STEPS - HEAD_STEPS
        shown: list[Any] = [*chosen[:HEAD_STEPS], None, *chosen[total - tail :]]
    else:
        shown = list(chosen)
    # many steps share the size budget: each value gets a fair share of it (at least
    # _MIN_VALUE_CHARS), so the last steps, where the outcome is, still fit
    fair = MAX_RENDER_CHARS // (3 * max(len(shown), 1))
    value_chars = max(_MIN_VALUE_CHARS, min(MAX_VALUE_CHARS, fair))
    lines: list[str] = []
    size = 0
    for position, step in enumerate(shown):
        if step is None:
            first, last = chosen[HEAD_STEPS].index, chosen[total - tail - 1].index
            hidden = total - MAX_RENDER_STEPS
            line = f"[... {hidden} steps not shown (steps {first} to {last}) ...]"
        else:
            line = _render_step(step, value_chars)
        if size + len(line) > MAX_RENDER_CHARS:
            left = sum(1 for s in shown[position:] if s is not None)
            lines.append(f"[... {left} more steps not shown: prompt size limit reached ...]")
            break
        lines.append(line)
        size += len(line) + 1
    if steps is None and view.steps_dropped:
        lines.append(f"[... {view.steps_dropped} later steps were not recorded (reader limit) ...]")
    if not lines:
        lines.append("(no steps recorded)")
    if final_output:
        lines.append("Final output: " + cut(view.final_output or "(none recorded)", MAX_TEXT_CHARS))
    return "\n".join(lines)


def _render_step(step: Any, limit: int = MAX_VALUE_CHARS) -> str:
    head = f"[step {step.index}] {step.kind} {step.name}"
    if getattr(step, "agent", None):
        head += f" (agent {step.agent})"
    parts = [head]
    if step.kind == "handoff" or getattr(step, "handoff_from", None):
        parts.append(f"  hand-off: {step.handoff_from or '?'} -> {step.handoff_to or '?'}")
    if step.arguments is not None:
        parts.append("  arguments: " + cut(step.arguments, limit))
    for request in getattr(step, "tool_calls", None) or []:
        parts.append(f"  requests tool {request.name}: {cut(request.arguments, limit)}")
    if step.result is not None and step.result != []:
        label = "result" if step.kind in ("tool_call", "retrieval", "handoff") else "output"
        parts.append(f"  {label}: " + cut(step.result, limit))
    if step.error:
        parts.append("  ERROR: " + cut(step.error, limit))
    return "\n".join(parts)


def _case_steps(calls: list[ToolCall] | None) -> list[Any]:
    return [
        CaseStep(i, call.name, arguments=call.input_parameters, result=call.output)
        for i, call in enumerate(calls or [])
    ]


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None
