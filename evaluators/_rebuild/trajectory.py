"""What an agent did, step by step: the :class:`Trajectory` of a turn, a trace or each turn of a
conversation, read from the span tree through the dialects like every other field.

A trajectory holds the task (the turn's input, read as :mod:`.cases` reads it), the ordered
:class:`Step` list, the tools the model was offered, the final output and the errors. Steps, in
start-time order over the turn's subtree (a trace: every span of the trace, those whose parent
never arrived included, with a note):

* ``model_call``: a model call (wrappers collapsed as :meth:`.SpanTree.collapsed_into` does),
  its output text and the tool calls it requested;
* ``tool_call``: a tool execution with its name, arguments, result and error;
* ``retrieval``: a retriever span, or a span :mod:`.inference` recognises by its documents;
* ``agent``: a sub-agent invoked inside the turn (``handoff_from`` set when it follows a
  sibling agent of another name: control passed from one to the other);
* ``handoff``: a hand-off span (OpenAI Agents SDK) or a ``transfer_to_<agent>`` tool call;
* ``plan``: a span of the semconv ``plan`` operation, its output as the plan.


How the steps relate, by rules that hold for any framework:

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
``billing-agent`` and ``transfer_to_billing_agent`` meet. Errors: status ``ERROR`` (with its
message), ``error.type``, ``exception`` events (unless the span's status says ``OK``: the
exception was handled), a tool status of ``error``. The tool calls a model requested and the
tools it was offered are read from the span by
:mod:`~spanjudge.evaluators._rebuild.dialects.tool_calls`, in every message form the readers
know.

Limits: at most :data:`MAX_STEPS` steps are kept (``steps_dropped`` counts the rest by span
kind, and a note says so); each step's arguments and result are cut at :data:`MAX_STEP_CHARS`,
the task and the final output at :data:`~.context.MAX_FIELD_CHARS`, with the reader's visible
marker. Memory is bounded by those limits whatever the trace holds; nothing here raises on bad
spans (a span that cannot be read is left out with a note). The dataclasses are the contract
the agentic metrics read; fields are only ever added.

Example::

    tree = SpanTree(trace_spans)
    trajectory = trajectory_of(tree, agent_span)
    [(s.kind, s.name) for s in trajectory.steps]
    # [("model_call", "gpt-4o-mini"), ("tool_call", "retrieve_docs"), ("model_call", ...)]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.context import cap
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.dialects.message_text import maybe_json, message_text
from spanjudge.evaluators._rebuild.dialects.tool_calls import (
    ERROR_STATUSES,
    ToolDefinition,
    ToolRequest,
    callable_tool_name,
    requested_tool_calls,
    tool_answers,
    tools_available,
)
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.target_text import first_text, turn_text
from spanjudge.evaluators._rebuild.targets import Target
from spanjudge.tracer import _attributes as attrs

__all__ = [
    "MAX_STEPS",
    "MAX_STEP_CHARS",
    "Step",
    "StepKind",
    "ToolDefinition",
    "ToolRequest",
    "Trajectory",
    "conversation_trajectories",
    "trace_trajectory",
    "trajectory_for",
    "trajectory_of",
]


MAX_STEPS = 1_000
"""Steps kept per trajectory; the rest are counted in ``steps_dropped``."""
MAX_ERRORS = 100
PLAN_OPERATION = "plan"
_STEP_KINDS = frozenset({"llm", "tool", "agent", "retriever"})
MAX_STEP_CHARS = 4_000
"""Longest argument or result of one step (JSON values are cut as their JSON text)."""
MAX_TOOLS_AVAILABLE = 200
"""Tool definitions kept per trajectory (the first ones, by name)."""
TOOL_STATUS = "gen_ai.tool.status"
EXCEPTION_EVENT = "exception"
_HANDOFF_SPAN = re.compile(
    r"(?i)^handoff\b(?:.*?\bfrom\s+(?P<src>\S+))?(?:.*?\bto\s+(?P<dst>\S+))?"
)
_TRANSFER_TOOL = re.compile(r"(?i)^transfer_to_(?P<dst>\w+)$")

StepKind = Literal["model_call", "tool_call", "retrieval", "agent", "handoff", "plan"]


@dataclass(slots=True)
class Step:
    """One thing the agent did. ``index`` is its position (0-based); ``agent`` the agent it ran
    under; ``arguments``/``result``: a tool call's, a retrieval's document texts (``result``),
    a model call's or a sub-agent's output text, a plan's text; ``tool_calls``: what a model
    call requested; ``handoff_from``/``handoff_to``: the agents of a hand-off;
    ``arguments_hidden``: the tool call's arguments were not recorded because content capture
    was off (two such calls are not known to be the same call); ``read_from``: how a step
    without a span of its own was read (a tool result found only in a tool message)."""

    index: int
    kind: StepKind
    name: str
    span_id: str
    agent: str | None = None
    arguments: Any = None
    result: Any = None
    error: str | None = None
    tool_calls: list[ToolRequest] = field(default_factory=list)
    handoff_from: str | None = None
    handoff_to: str | None = None
    arguments_hidden: bool = False
    read_from: str | None = None

    def describe(self, limit: int = 120) -> str:
        """One line: ``step 2 tool_call lookup_order {"id": 7} -> error: KeyError``."""
        head = f"step {self.index} {self.kind} {self.name}"
        if self.kind == "tool_call" and self.arguments is not None:
            head += " " + short(as_text(self.arguments), limit)
        elif self.arguments_hidden:
            head += " (arguments hidden: content capture off)"
        if self.tool_calls:
            head += " requests " + ", ".join(c.name for c in self.tool_calls)
        if self.handoff_from or self.handoff_to:
            head += f" ({self.handoff_from or '?'} -> {self.handoff_to or '?'})"
        if self.error:
            return f"{head} -> error: {short(self.error, limit)}"
        return head


@dataclass(slots=True)
class Trajectory:
    """An agent turn (``scope="agent"``), a whole trace (``"trace"``) or what led to one model
    call (``"llm"``) as a sequence of steps; see the module docstring."""

    scope: Literal["agent", "trace", "llm"]
    trace_id: str
    span_id: str | None
    task: str | None = None
    final_output: str | None = None
    agent: str | None = None
    steps: list[Step] = field(default_factory=list)
    tools_available: list[ToolDefinition] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    steps_dropped: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def tool_calls(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "tool_call"]

    @property
    def model_calls(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "model_call"]

    @property
    def tool_errors(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "tool_call" and s.error]

    @property
    def handoffs(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "handoff" or s.handoff_from]

    @property
    def agents(self) -> list[str]:
        """Agent names seen, the turn's own first, each once."""
        names = [self.agent] + [s.agent for s in self.steps]
        names += [s.name for s in self.steps if s.kind == "agent"]
        names += [n for s in self.handoffs for n in (s.handoff_from, s.handoff_to)]
        return list(dict.fromkeys(n for n in names if n))

    def lines(self, limit: int = 120) -> list[str]:
        """The trajectory as short lines (what ``spanjudge explain`` prints)."""
        out = [f"task: {short(self.task or '(none)', limit)}"]
        if self.tools_available:
            out.append("tools available: " + ", ".join(t.name for t in self.tools_available))
        out.extend(s.describe(limit) for s in self.steps)
        if self.steps_dropped:
            out.append(f"... {self.steps_dropped} more step(s) not kept (limit {MAX_STEPS})")
        out.append(f"final output: {short(self.final_output or '(none)', limit)}")
        out.extend(f"note: {n}" for n in self.notes)
        return out

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready when the values read from spans are)."""
        return asdict(self)


# ====================================================================== entry points
def trajectory_of(tree: SpanTree, span: SpanRecord) -> Trajectory:
    """The trajectory ``span`` stands for: an agent span's turn, a model call's turn up to
    that call, any other span's whole trace."""
    kind = tree.kind(span)
    view = read_span(span)
    if kind == "agent":
        scope: list[SpanRecord] = tree.subtree(span)
        found = Trajectory("agent", span.trace_id, span.span_id, agent=view.agent_name)
        text_in, text_out = turn_text(span, tree, {})
        text_in = _task_text(tree, scope, text_in)
    elif kind == "llm":
        scope = [*tree.scope_of(span), span]
        turn = tree.turn_of(span)
        name = read_span(turn).agent_name if turn is not None else None
        found = Trajectory("llm", span.trace_id, span.span_id, agent=name)
        text_in, text_out = view.input_text, view.output_text
    else:
        return trace_trajectory(tree, span.trace_id)
    _fill(found, tree, scope, [span])
    _texts(found, text_in, text_out)
    return found


def trace_trajectory(tree: SpanTree, trace_id: str) -> Trajectory:
    """Every step of one trace, read in start-time order, spans with a missing parent
    included (the note counts them)."""
    spans = sorted(
        (s for s in tree.spans if s.trace_id == trace_id and not _evaluation(s)),
        key=lambda s: (s.start_time_unix_nano, s.span_id),
    )
    roots = [s for s in spans if not s.parent_span_id]
    root = roots[0] if roots else (spans[0] if spans else None)
    found = Trajectory("trace", trace_id, root.span_id if root else None)
    if root is None:
        found.notes.append("no spans of this trace")
        return found
    orphans = sum(1 for s in spans if s.parent_span_id and tree.parent(s) is None)
    if orphans:
        found.notes.append(f"{orphans} span(s) whose parent is missing, read in time order")
    if not roots:
        found.notes.append("no root span: read from the earliest span")
    agents = [s for s in spans if tree.kind(s) == "agent" and tree.collapsed_into(s) is None]
    llms = [s for s in spans if tree.kind(s) == "llm" and tree.collapsed_into(s) is None]
    found.agent = next((read_span(s).agent_name for s in agents if read_span(s).agent_name), None)
    text_in = first_text([root, *agents, *llms], "input", {})
    text_out = first_text([root, *reversed(agents), *reversed(llms)], "actual_output", {})
    _fill(found, tree, [s for s in spans if s is not root], [root])
    _texts(found, text_in, text_out)
    return found


def conversation_trajectories(tree: SpanTree, turns: Iterable[SpanRecord]) -> list[Trajectory]:
    """One trajectory per turn span of a conversation, in the order given."""
    return [trajectory_of(tree, span) for span in turns]


def trajectory_for(target: Target, spans: list[SpanRecord]) -> list[Trajectory]:
    """The trajectories of a planned target: one for a span or trace target, one per turn for
    a conversation (none when the target has no span)."""
    tree = SpanTree([s for s in spans if not _evaluation(s)])
    if target.target_type == "conversation":
        return conversation_trajectories(tree, target.turn_spans)
    if target.span is None:
        return []
    if target.target_type == "trace":
        return [trace_trajectory(tree, target.span.trace_id)]
    return [trajectory_of(tree, target.span)]


# ====================================================================== reading
def _fill(
    found: Trajectory, tree: SpanTree, scope: list[SpanRecord], own: list[SpanRecord]
) -> None:
    owners: dict[tuple[str, str], str | None] = {}
    last_agent: dict[tuple[str, str | None], str] = {}
    tools: dict[str, ToolDefinition] = {}
    links = Links(known_agents(tree, [*own, *scope]))
    # tools that have no span of their own answer in the next model call's tool messages
    tool_spans = any(tree.kind(s) == "tool" for s in scope)
    for span in own:
        offer_tools(span, tools)
    for span in scope:
        if _evaluation(span):
            continue
        # an agent-marked span folded into a turn is read as the tool the model requested,
        # when it is one (a hand-off tool a library marked as an agent)
        as_tool = tree.kind(span) == "agent" and norm(_agent_name(span)) in links.requests.names
        if tree.collapsed_into(span) is not None and not as_tool:
            continue
        if len(found.steps) >= MAX_STEPS:
            # past the limit, steps are counted by their kind alone: reading 10,000 spans in
            # full took seconds for steps nobody keeps
            found.steps_dropped += tree.kind(span) in _STEP_KINDS
            continue
        try:
            step = _step(tree, span, len(found.steps), as_tool)
            if step is not None:
                step.agent = owner_of(tree, span, owners, links.delegations)
                if step.kind == "model_call" and not tool_spans:
                    _answered_in_messages(found, span, step, links)
                links.relate(tree, span, step)
        except Exception as exc:  # an unforeseen value: the step is left out, and said so
            if len(found.notes) < MAX_ERRORS:
                found.notes.append(f"span {span.span_id} not read: {type(exc).__name__}: {exc}")
            continue
        if step is None:
            continue
        if step.kind in ("model_call", "agent"):
            offer_tools(span, tools)
        previous = found.steps[-1] if found.steps else None
        if step.kind == "handoff" and step.handoff_from is None:
            # a hand-off leaves the agent that was acting
            step.handoff_from = previous.agent if previous is not None else step.agent
        if step.kind == "agent":
            siblings = (span.trace_id, span.parent_span_id or None)
            before = last_agent.get(siblings)
            announced = norm(step.name) in links.handed
            if before is not None and before != step.name and not announced:
                step.handoff_from, step.handoff_to = before, step.name
            last_agent[siblings] = step.name
        found.steps.append(step)
        if step.error and len(found.errors) < MAX_ERRORS:
            found.errors.append(step.describe())
    _mark_hidden_arguments(found, tree, [*own, *scope])
    stepped = {s.span_id for s in found.steps}
    for span in own:
        error = error_of(span) if span.span_id not in stepped else None
        if error and len(found.errors) < MAX_ERRORS:
            found.errors.append(f"{span.name}: {short(error, 300)}")
    found.tools_available = list(tools.values())
    if found.steps_dropped:
        found.notes.append(f"{found.steps_dropped} step(s) after the first {MAX_STEPS} dropped")


def _step(tree: SpanTree, span: SpanRecord, index: int, as_tool: bool = False) -> Step | None:
    view = read_span(span)
    error = error_of(span) or view.error  # a declared reader's error field
    if span.operation == PLAN_OPERATION:
        return Step(
            index, "plan", span.name, span.span_id, result=bounded(view.output_text), error=error
        )
    handoff = handoff_span(span)
    if handoff is not None:
        return Step(
            index, "handoff", span.name, span.span_id, error=error,
            handoff_from=handoff[0], handoff_to=handoff[1],
        )  # fmt: skip
    kind = "tool" if as_tool else tree.kind(span)
    if kind == "llm":
        requested = [
            ToolRequest(c.name, bounded(c.arguments), c.call_id) for c in requested_tool_calls(span)
        ]
        return Step(
            index, "model_call", view.model or span.name, span.span_id,
            result=bounded(view.output_text), error=error, tool_calls=requested,
        )  # fmt: skip
    if kind == "tool":
        tool = view.tool
        name = (
            tool.name
            if tool is not None and tool.name.strip()
            else callable_tool_name(_agent_name(span))
        )
        arguments = bounded(call_arguments(tool.arguments)) if tool is not None else None
        returned = tool.result if tool is not None else view.output_text
        return Step(
            index, "tool_call", name, span.span_id, arguments=arguments,
            result=bounded(tool_result(returned)), error=error,
        )  # fmt: skip
    if kind == "agent":
        name = view.agent_name or span.name
        return Step(
            index, "agent", name, span.span_id, result=bounded(view.output_text), error=error
        )
    retrieval = tree.retrieval(span)
    parent = tree.parent(span)
    if retrieval is not None and (parent is None or tree.retrieval(parent) is None):
        # a retriever inside a retriever (a public method around the private one): one step
        texts = [bounded(d.text) for d in retrieval[0] if d.text]
        return Step(index, "retrieval", span.name, span.span_id, result=texts, error=error)
    return None


READ_FROM_TOOL_MESSAGE = "tool message in a later model call's input"


def _answered_in_messages(found: Trajectory, span: SpanRecord, step: Step, links: Links) -> None:
    """Tool executions with no span of their own, read from the tool messages of the model call
    ``span`` (``step``, not yet kept) that answer requests of earlier model calls: paired by
    the call id, else by the name, else by order. Each becomes a ``tool_call`` step before the
    model call, with the request's name and arguments and the message's result and error."""
    if not links.requests.pending:
        return
    for answer in tool_answers(span):
        request = links.requests.answer(answer.name or "", answer.call_id)
        pending = links.requests.pending
        if request is None and pending and not (answer.call_id and any(r.call_id for r in pending)):
            request = pending.pop(0)  # no ids to pair by: the order the calls were asked in
        if request is None:
            continue
        if len(found.steps) >= MAX_STEPS:
            found.steps_dropped += 1
            continue
        tool = Step(
            len(found.steps), "tool_call", request.name, span.span_id, agent=step.agent,
            arguments=bounded(request.arguments), result=bounded(tool_result(answer.content)),
            error=answer.error, read_from=READ_FROM_TOOL_MESSAGE,
        )  # fmt: skip
        found.steps.append(tool)
        if tool.error and len(found.errors) < MAX_ERRORS:
            found.errors.append(tool.describe())
    step.index = len(found.steps)


def _mark_hidden_arguments(found: Trajectory, tree: SpanTree, spans: list[SpanRecord]) -> None:
    """Tool calls without arguments where content capture was off (the tool span's or a model
    call's of the same trajectory): their arguments are hidden, not absent."""
    calls = [s for s in found.steps if s.kind == "tool_call" and s.arguments is None]
    if not calls:
        return
    off = any(read_span(s).capture_off for s in spans if tree.kind(s) in ("llm", "agent"))
    by_id = {s.span_id: s for s in spans}
    for step in calls:
        span = by_id.get(step.span_id)
        step.arguments_hidden = off or (
            span is not None and read_span(span).capture_off is not None
        )


def _task_text(tree: SpanTree, scope: list[SpanRecord], text_in: str | None) -> str | None:
    """The turn's input, unless it is data (a JSON object or list: a framework's
    configuration or state, not the user's words): then the first model call's input."""
    if text_in is None or not isinstance(maybe_json(text_in), dict | list):
        return text_in
    first = next(
        (s for s in scope if tree.kind(s) == "llm" and tree.collapsed_into(s) is None), None
    )
    asked = read_span(first).input_text if first is not None else None
    return asked or text_in


def _agent_name(span: SpanRecord) -> str:
    return read_span(span).agent_name or span.name


def _texts(found: Trajectory, text_in: str | None, text_out: str | None) -> None:
    found.task = cap(text_in.strip(), "task", []) if text_in else None
    found.final_output = cap(text_out.strip(), "final_output", []) if text_out else None


def _evaluation(span: SpanRecord) -> bool:
    return attrs.GEN_AI_EVALUATION_NAME in span.attributes


# ====================================================================== how steps relate
_NOT_WORD = re.compile(r"[^a-z0-9]+")
_MAX_NAME = 64  # a one-word argument longer than this is not an agent's name


def norm(name: str | None) -> str:
    """``name`` lower-cased, each run of other characters one ``_`` (``""`` for ``None``)."""
    return _NOT_WORD.sub("_", (name or "").lower()).strip("_")


# ====================================================================== tool results
def tool_result(value: Any) -> Any:
    """What a tool returned, unwrapped from text blocks or a tool message (else as given)."""
    parsed = maybe_json(value)
    if isinstance(parsed, list) and parsed and all(isinstance(p, Mapping) for p in parsed):
        joined = message_text(parsed)
        return joined if joined is not None else value
    if isinstance(parsed, Mapping):
        data = parsed.get("data")
        if parsed.get("type") == "tool" and isinstance(data, Mapping):
            parsed = data  # LangChain's serialised ToolMessage
        if "tool" in (parsed.get("role"), parsed.get("type")) and "content" in parsed:
            content = maybe_json(parsed["content"])
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
    asked = maybe_json(request.arguments) if request is not None else None
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
            call_id = view.call_id if view is not None else None
            request = self.requests.answer(step.name, call_id)
            # the agent's own record of the tool it chose wins: the request answered by the
            # call id, or by the name in another spelling
            if request is not None and (
                norm(request.name) == norm(step.name)
                or (call_id is not None and request.call_id == call_id)
            ):
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


# ====================================================================== errors, hand-offs
def error_of(span: SpanRecord) -> str | None:
    """What went wrong in ``span``, or ``None``: the exception event's type and message, the
    status message, ``error.type``, a tool status of ``error``. An exception recorded on a span
    whose status says ``OK`` was handled (LangGraph raises one to pass control between agents):
    not the step's error."""
    for event in span.events:
        if event.name == EXCEPTION_EVENT and span.status_code != "OK":
            kind = event.attributes.get("exception.type")
            message = event.attributes.get("exception.message")
            parts = [str(p) for p in (kind, message) if p not in (None, "")]
            return ": ".join(parts) or "exception"
    error_type = span.attributes.get(attrs.ERROR_TYPE)
    if span.status_code == "ERROR":
        detail = span.status_message or (str(error_type) if error_type else None)
        return detail or "status ERROR"
    if error_type not in (None, ""):
        return str(error_type)
    status = span.attributes.get(TOOL_STATUS)
    if isinstance(status, str) and status.lower() in ERROR_STATUSES:
        return f"tool status {status}"
    return None


def handoff_span(span: SpanRecord) -> tuple[str | None, str | None] | None:
    """``(from agent, to agent)`` when ``span`` records a hand-off (either may be unknown)."""
    match = _HANDOFF_SPAN.match(span.name)
    if match is None:
        return None
    a = span.attributes
    src = _agent_attr(a, "from") or match.group("src")
    dst = _agent_attr(a, "to") or match.group("dst")
    return (src, dst)


def _agent_attr(a: Mapping[str, Any], side: str) -> str | None:
    for key, value in a.items():
        if key.endswith((f"{side}_agent", f"handoff.{side}")) and isinstance(value, str):
            return value
    return None


def transfer_target(tool_name: str) -> str | None:
    """The agent a ``transfer_to_<agent>`` tool hands off to, else ``None``."""
    match = _TRANSFER_TOOL.match(tool_name.strip())
    return match.group("dst") if match else None


# ====================================================================== values
_PYTHON_CALL_KEYS = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})


def call_arguments(value: Any) -> Any:
    """A tool's arguments as the model gave them: instrumentations of Python tools record
    the call (``{"args": [], "kwargs": {"query": ...}}``: smolagents, LlamaIndex)."""
    if (
        isinstance(value, dict)
        and isinstance(value.get("kwargs"), dict)
        and not value.get("args")
        and set(value) <= _PYTHON_CALL_KEYS
    ):
        return value["kwargs"]
    return value


def bounded(value: Any) -> Any:
    """A step's value bounded at :data:`MAX_STEP_CHARS` with the reader's marker."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return short(value, MAX_STEP_CHARS, marker=True)
    dumped = as_text(value)
    return value if len(dumped) <= MAX_STEP_CHARS else short(dumped, MAX_STEP_CHARS, marker=True)


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        dumped: str = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)
    return dumped


def short(text: str, limit: int, *, marker: bool = False) -> str:
    if len(text) <= limit:
        return text
    if marker:
        return text[:limit] + attrs.TRUNCATION_MARKER.format(dropped=len(text) - limit)
    return text[:limit] + "..."


# ====================================================================== tools offered
def offer_tools(span: SpanRecord, tools: dict[str, ToolDefinition]) -> None:
    """Add the tools ``span`` lists to ``tools`` (by name, at most
    :data:`MAX_TOOLS_AVAILABLE`)."""
    for tool in tools_available(span):
        known = tools.get(tool.name)
        if known is None and len(tools) < MAX_TOOLS_AVAILABLE:
            tools[tool.name] = tool
        elif known is not None and known.description is None and tool.description:
            tools[tool.name] = tool  # a fuller definition of a tool only named before
