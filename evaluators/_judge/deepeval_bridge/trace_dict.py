"""Our :class:`~spanjudge.evaluators._rebuild.trajectory.Trajectory` as the trace deepeval's
agent metrics read: the nested span dict deepeval puts on a test case (``_trace_dict``) when it
evaluates an ``@observe``-d agent, built by deepeval's own span types and its own converter
(``trace_manager.create_nested_spans_dict``), so the metrics see the keys they expect.

How a trajectory maps onto deepeval's spans:

* the turn (or trace) is the root: an ``agent`` span named after the agent (the agent of its
  first step when the turn's span names none; a trace where no agent was seen is a ``base``
  span named ``trace``) whose input is the task and output the final output, with
  ``available_tools`` (the names of the tools the model was offered) and ``agent_handoffs``
  (the agents control was handed to);
* a model call is an ``llm`` span (``model`` its model name) whose output is the text it wrote
  or, when it requested tools, deepeval's ``LlmOutput`` with the tool calls (name, arguments
  as a dict, call id), as deepeval's own integrations record them;
* a tool execution is a ``tool`` span: input the arguments, output the result, ``error``;
* a retrieval is a ``retriever`` span with the documents as output and ``retrieval_context``;
* a sub-agent is an ``agent`` span; the steps that ran under it are its children (the step's
  ``agent``), so a hand-off to a second agent nests its steps under that agent;
* a hand-off is a ``tool`` span named as read (``transfer_to_billing`` ...) whose input says
  ``from`` and ``to``; a plan is a ``base`` span (named as read, ``plan`` when unnamed) whose
  output is the plan.

Steps keep their order. What the trajectory cut (``steps_dropped``, long values, notes) stays
visible: the cut values carry the reader's marker, and the count of dropped steps and the
reader's notes go into a last ``base`` span named ``notes`` (deepeval strips ``metadata`` from
the dict, so the judge would never see them there). Agents nest at most :data:`MAX_DEPTH`
levels deep; deeper ones keep their steps at that level.

Example::

    case = to_deepeval_case(our_case)
    case._trace_dict = trace_dict(our_case.trajectory)
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:  # read by shape at run time: the online loop imports this package
    from spanjudge.evaluators._rebuild.trajectory import Step, Trajectory

_ROOT_TRACE = "trace"
_ROOT_AGENT = "agent"
_PLAN = "plan"
MAX_DEPTH = 32
"""Deepest agent nesting kept: a sub-agent deeper than this holds its steps at this depth
(deepeval's converter and serializer recurse once per level)."""


def _arguments(value: Any) -> dict[str, Any]:
    """A tool call's arguments as the dict deepeval's ``LlmToolCall.args`` requires."""
    if isinstance(value, dict):
        return value
    if value is None or value == "":
        return {}
    return {"arguments": value}


def _llm_output(step: Step) -> Any:
    from deepeval.tracing.types import LlmOutput, LlmToolCall

    if not step.tool_calls:
        return step.result
    calls = [
        LlmToolCall(name=c.name, args=_arguments(c.arguments), id=c.call_id)
        for c in step.tool_calls
    ]
    return LlmOutput(role="assistant", content=step.result or "", tool_calls=calls)


class _Builder:
    """deepeval span objects for one trajectory, parented as the steps ran."""

    def __init__(self, trajectory: Trajectory) -> None:
        from deepeval.tracing.types import TraceSpanStatus

        self.trajectory = trajectory
        self.trace_uuid = f"spanjudge-{trajectory.trace_id}"
        self.ids = itertools.count()
        self.clock = itertools.count(1)
        self.success = TraceSpanStatus.SUCCESS
        self.errored = TraceSpanStatus.ERRORED

    def fields(self, name: str, parent: Any, error: str | None) -> dict[str, Any]:
        return {
            "uuid": f"{self.trace_uuid}-{next(self.ids)}",
            "trace_uuid": self.trace_uuid,
            "parent_uuid": parent.uuid if parent is not None else None,
            "status": self.errored if error else self.success,
            "start_time": float(next(self.clock)),
            "end_time": float(next(self.clock)),
            "name": name,
            "error": error,
        }

    def root(self) -> Any:
        from deepeval.tracing.types import AgentSpan, BaseSpan

        t = self.trajectory
        if t.scope == "trace" and t.agent is None:
            common = self.fields(_ROOT_TRACE, None, None)
            return BaseSpan(**common, input=t.task, output=t.final_output)
        # an agent turn whose span names no agent: the agent its first step ran under
        name = t.agent or next((s.agent for s in t.steps if s.agent), None) or _ROOT_AGENT
        common = self.fields(name, None, None)
        tools = [d.name for d in t.tools_available]
        return AgentSpan(**common, input=t.task, output=t.final_output, available_tools=tools)

    def span(self, step: Step, parent: Any) -> Any:
        from deepeval.tracing.types import (
            AgentSpan,
            BaseSpan,
            LlmSpan,
            RetrieverSpan,
            ToolSpan,
        )

        common = self.fields(step.name, parent, step.error)
        if step.kind == "model_call":
            return LlmSpan(**common, model=step.name, output=_llm_output(step))
        if step.kind == "tool_call":
            return ToolSpan(**common, input=step.arguments, output=step.result)
        if step.kind == "retrieval":
            docs = [str(d) for d in step.result or []]
            return RetrieverSpan(**common, output=docs, retrieval_context=docs or None)
        if step.kind == "agent":
            return AgentSpan(**common, output=step.result)
        if step.kind == "handoff":
            moved = {"from": step.handoff_from, "to": step.handoff_to}
            if step.arguments not in (None, {}, ""):
                moved["arguments"] = step.arguments
            return ToolSpan(**common, input=moved, output=step.result)
        common["name"] = _PLAN if step.name in ("", None) else step.name
        return BaseSpan(**common, output=step.result)


def trace_spans(trajectory: Trajectory) -> Any:
    """The root deepeval span of ``trajectory``, its steps as nested children (see the module
    docstring for the mapping)."""
    from deepeval.tracing.types import AgentSpan, BaseSpan

    build = _Builder(trajectory)
    root = build.root()
    # the span a step's agent runs in: the latest agent span of that name, else the root
    agents: dict[str, Any] = {root.name: root} if isinstance(root, AgentSpan) else {}
    depth = {id(root): 0}
    for step in trajectory.steps:
        parent = agents.get(step.agent or "", root)
        span = build.span(step, parent)
        parent.children.append(span)
        if step.kind == "agent":
            level = depth[id(parent)] + 1
            if level < MAX_DEPTH:
                agents[step.name] = span
                depth[id(span)] = level
            else:  # too deep: what runs under it stays with its parent
                agents[step.name] = parent
        target = step.handoff_to
        if target and isinstance(parent, AgentSpan) and target not in parent.agent_handoffs:
            parent.agent_handoffs.append(target)
    lines = list(trajectory.notes)
    if trajectory.steps_dropped:
        lines.insert(0, f"{trajectory.steps_dropped} more step(s) not shown (cut by spanjudge)")
    if lines:
        notes = BaseSpan(**build.fields("notes", root, None), output="\n".join(lines))
        root.children.append(notes)
    return root


def trace_dict(trajectory: Trajectory) -> dict[str, Any]:
    """``trajectory`` as the nested dict deepeval's trace-based metrics read from
    ``LLMTestCase._trace_dict`` (what deepeval builds for an ``@observe``-d agent)."""
    from deepeval.tracing.tracing import trace_manager

    found: dict[str, Any] = trace_manager.create_nested_spans_dict(trace_spans(trajectory))
    return found


# ---------------------------------------------------------------------------- on a case
def requires_trace(metric: Any) -> bool:
    """Whether a deepeval metric reads the trace (deepeval marks them ``requires_trace``)."""
    return getattr(metric, "requires_trace", False) is True


def fills_tools(metric: Any) -> bool:
    """Whether the bridge gives ``metric`` the tools the model was offered: a deepeval metric
    with an ``available_tools`` parameter (Tool Correctness, Tool Use) left empty by its
    author; the tools read from the spans then stand in for it, evaluation by evaluation."""
    return hasattr(metric, "available_tools") and not getattr(metric, "available_tools", None)


def _is_trajectory(value: Any) -> TypeGuard[Trajectory]:
    return all(hasattr(value, name) for name in ("steps", "tools_available", "notes"))


def _trajectories(case: Any) -> list[Trajectory]:
    holders = list(getattr(case, "turns", None) or []) or [case]
    found = [getattr(h, "trajectory", None) for h in holders]
    return [t for t in found if _is_trajectory(t)]


def has_steps(case: Any) -> bool:
    """Whether ``case`` (ours) carries a trajectory with at least one step."""
    return any(t.steps for t in _trajectories(case))


def offered_tools(case: Any) -> list[Any]:
    """The tools the model was offered in ``case``'s trajectories, as deepeval ``ToolCall``
    objects (name, description, parameter schema), each name once."""
    from deepeval.test_case import ToolCall as DeepEvalToolCall

    seen: dict[str, Any] = {}
    for trajectory in _trajectories(case):
        for tool in trajectory.tools_available:
            if tool.name in seen:
                continue
            schema = tool.parameters if isinstance(tool.parameters, dict) else None
            seen[tool.name] = DeepEvalToolCall(
                name=tool.name, description=tool.description, input_parameters=schema
            )
    return list(seen.values())


def prepare(metric: Any, ours: Any, theirs: Any, *, fill_tools: bool) -> None:
    """Give deepeval's case ``theirs`` the trace a trace-based ``metric`` reads (from ``ours``'s
    trajectory), and ``metric`` the offered tools when ``fill_tools``."""
    trajectory = getattr(ours, "trajectory", None)
    if requires_trace(metric) and _is_trajectory(trajectory):
        theirs._trace_dict = trace_dict(trajectory)
    if fill_tools:
        metric.available_tools = offered_tools(ours) or None
