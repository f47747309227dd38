"""How the steps of a trajectory relate to each other, read by rules that hold for any framework:

* **A tool result is what the tool returned**, not its wrapper: a list of text blocks
  (``[{"text": ...}]``, MCP's ``{"type": "text", ...}``) is their text; a tool message (role or
  type ``tool``, or LangChain's serialised ``{"type": "tool", "data": {...}}``) is its content.
* **A tool execution is the call the model requested**: paired with the model's request by the
  call id, else by the name (first unanswered request), it takes the request's name when the
  span names the tool differently (``Delegate work to coworker`` for
  ``delegate_work_to_coworker``), and the request's arguments when the span records none, or
  only the bare value of a one-argument call.
* **A hand-off is a tool call that passes control to another agent**: one whose execution runs
  model calls of its own (a delegation: the other agent runs inside the call), or one that
  names another agent of the trace, in its name or as an argument, when that agent acts after
  it. The agent handed to is the one named (a known agent of the trace first, else a one-word
  argument, else ``transfer_to_<agent>``).

Names are compared normalised (:func:`norm`): lower case, runs of other characters as ``_``, so
``billing-agent`` and ``transfer_to_billing_agent`` meet.

Example::

    tool_result('[{"text": "Order A-1001: blender"}]')    # "Order A-1001: blender"
    norm("Billing Agent")                                  # "billing_agent"
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import message_text as text
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.trajectory_read import (
    ToolRequest,
    bounded,
    transfer_target,
)

if TYPE_CHECKING:
    from spanjudge.evaluators._rebuild.scope import SpanTree
    from spanjudge.evaluators._rebuild.trajectory import Step

_NOT_WORD = re.compile(r"[^a-z0-9]+")
_MAX_NAME = 64  # a one-word argument longer than this is not an agent's name


def norm(name: str | None) -> str:
    """``name`` lower-cased, each run of other characters one ``_`` (``""`` for ``None``)."""
    return _NOT_WORD.sub("_", (name or "").lower()).strip("_")


# ====================================================================== tool results
def tool_result(value: Any) -> Any:
    """What a tool returned, unwrapped from text blocks or a tool message (else as given)."""
    parsed = text.maybe_json(value)
    if isinstance(parsed, list) and parsed and all(isinstance(p, Mapping) for p in parsed):
        joined = text.message_text(parsed)
        return joined if joined is not None else value
    if isinstance(parsed, Mapping):
        data = parsed.get("data")
        if parsed.get("type") == "tool" and isinstance(data, Mapping):
            parsed = data  # LangChain's serialised ToolMessage
        if "tool" in (parsed.get("role"), parsed.get("type")) and "content" in parsed:
            content = text.maybe_json(parsed["content"])
            return tool_result(content) if isinstance(content, list) else content
    return value


# ====================================================================== requests
@dataclass(slots=True)
class Requests:
    """The tool calls requested so far in a trajectory and not yet answered by an execution."""

    by_id: dict[str, ToolRequest] = field(default_factory=dict)
    pending: list[ToolRequest] = field(default_factory=list)
    names: set[str] = field(default_factory=set)

    def add(self, requests: list[ToolRequest]) -> None:
        for request in requests:
            self.pending.append(request)
            self.names.add(norm(request.name))
            if request.call_id:
                self.by_id[request.call_id] = request

    def answer(self, name: str, call_id: str | None) -> ToolRequest | None:
        """The request an execution of ``name`` (call id ``call_id``) answers, taken off."""
        found = self.by_id.get(call_id) if call_id else None
        if found is None:
            found = next((r for r in self.pending if norm(r.name) == norm(name)), None)
        if found is not None:
            self.pending = [r for r in self.pending if r is not found]
        return found


def requested_arguments(arguments: Any, request: ToolRequest | None) -> Any:
    """The execution's arguments, or the request's when the span has none or only the bare
    value of a one-argument call."""
    asked = text.maybe_json(request.arguments) if request is not None else None
    if not isinstance(asked, Mapping):
        return arguments
    if arguments is None or arguments == "":
        return dict(asked)
    if not isinstance(arguments, Mapping | list) and len(asked) == 1:
        [only] = asked.values()
        if str(only) == str(arguments):
            return dict(asked)
    return arguments


# ====================================================================== hand-offs
@dataclass(slots=True)
class Agents:
    """The agents of a trajectory's spans by normalised name (agent spans that stand for an
    agent: kept, or a wrapper of a span of the same name; not steps folded into a turn), and
    when each last started."""

    names: dict[str, str] = field(default_factory=dict)
    last_start: dict[str, int] = field(default_factory=dict)

    def acts_after(self, agent: str, span: SpanRecord) -> bool:
        """Whether an agent span named ``agent`` starts at or after ``span``."""
        return self.last_start.get(norm(agent), -1) >= span.start_time_unix_nano


def known_agents(tree: SpanTree, spans: list[SpanRecord]) -> Agents:
    """The :class:`Agents` of ``spans``."""
    out = Agents()
    for span in spans:
        if tree.kind(span) != "agent":
            continue
        name = read_span(span).agent_name or span.name
        key = norm(name)
        out.last_start[key] = max(out.last_start.get(key, -1), span.start_time_unix_nano)
        kept = tree.collapsed_into(span)
        if kept is not None and norm(read_span(kept).agent_name or kept.name) != key:
            continue
        out.names.setdefault(key, name)
    return out


def named_agent(
    name: str, arguments: Any, agents: dict[str, str], caller: str | None
) -> str | None:
    """The known agent (other than ``caller``) a tool call names: its name ends with the
    agent's (the longest such), or an argument is the agent's name."""
    tool = norm(name)
    own = norm(caller)
    ends = [a for a in agents if a != own and a != tool and tool.endswith("_" + a)]
    if ends:
        return agents[max(ends, key=len)]
    if isinstance(arguments, Mapping):
        for value in arguments.values():
            if isinstance(value, str) and norm(value) in agents and norm(value) not in (own, tool):
                return agents[norm(value)]
    return None


def one_word_argument(arguments: Any) -> str | None:
    """The only argument value that is one word (an identifier, as agents' names are)."""
    if not isinstance(arguments, Mapping):
        return None
    words = [
        v
        for v in arguments.values()
        if isinstance(v, str) and v.strip() and len(v) <= _MAX_NAME and not re.search(r"\s", v)
    ]
    return words[0] if len(words) == 1 else None


def runs_model(tree: SpanTree, span: SpanRecord) -> bool:
    """Whether a model call runs inside ``span`` (a tool that runs an agent)."""
    return any(tree.kind(s) == "llm" for s in tree.subtree(span))


def handoff_target(
    tree: SpanTree, span: SpanRecord, name: str, arguments: Any, agents: Agents, caller: str | None
) -> tuple[bool, str | None]:
    """``(is a hand-off, the agent handed to)`` for the tool call ``span`` (see the module
    docstring); the agent may be unknown on a delegation that names none."""
    named = named_agent(name, arguments, agents.names, caller)
    if runs_model(tree, span):
        return True, named or one_word_argument(arguments) or transfer_target(name)
    if named is not None and agents.acts_after(named, span):
        return True, named
    return False, None


# ====================================================================== one trajectory's links
@dataclass(slots=True)
class Links:
    """What relates the steps of one trajectory as they are read in order: the agents of its
    scope, the requests not yet answered, the agents handed to (normalised), and the tool
    spans that run another agent (span id -> that agent)."""

    agents: Agents
    requests: Requests = field(default_factory=Requests)
    handed: set[str] = field(default_factory=set)
    delegations: dict[str, str | None] = field(default_factory=dict)

    def relate(self, tree: SpanTree, span: SpanRecord, step: Step) -> None:
        """Pair ``step`` with what came before it (see the module docstring); a tool call that
        hands off becomes a ``handoff`` step."""
        if step.kind == "model_call":
            self.requests.add(step.tool_calls)
        elif step.kind == "tool_call":
            view = read_span(span).tool
            request = self.requests.answer(step.name, view.call_id if view is not None else None)
            if request is not None and norm(request.name) == norm(step.name):
                step.name = request.name
            step.arguments = bounded(requested_arguments(step.arguments, request))
            handoff, target = handoff_target(
                tree, span, step.name, step.arguments, self.agents, step.agent
            )
            if not handoff and transfer_target(step.name) is not None:
                handoff, target = True, transfer_target(step.name)
            if handoff:
                step.kind = "handoff"
                step.handoff_from, step.handoff_to = step.agent, target
                if runs_model(tree, span):
                    self.delegations[span.span_id] = target
        if step.kind == "handoff" and step.handoff_to:
            self.handed.add(norm(step.handoff_to))


def owner_of(
    tree: SpanTree,
    span: SpanRecord,
    memo: dict[tuple[str, str], str | None],
    delegations: dict[str, str | None],
) -> str | None:
    """The name of the nearest agent enclosing ``span`` (an agent span, named as the span it
    is folded into, or a tool that runs another agent): memoised, so a deep tree is read in
    one pass whatever its depth (a cycle stops the walk)."""
    path: list[tuple[str, str]] = []
    seen = {span.span_id}
    found: str | None = None
    current = tree.parent(span)
    while current is not None and current.span_id not in seen:
        at = (current.trace_id, current.span_id)
        if delegations.get(current.span_id):
            found = delegations[current.span_id]
            break
        if at in memo:
            found = memo[at]
            break
        if tree.kind(current) == "agent":
            kept = tree.collapsed_into(current) or current
            found = read_span(kept).agent_name or kept.name
            break
        seen.add(current.span_id)
        path.append(at)
        current = tree.parent(current)
    for at in path:
        memo[at] = found
    return found
