"""What an agent did, step by step: the :class:`Trajectory` of a turn, a trace or each turn of a
conversation, read from the span tree through the dialects like every other field.

A trajectory holds the task (the turn's input, read as :mod:`.cases` reads it), the ordered
:class:`Step` list, the tools the model was offered, the final output and the errors. Steps, in
start-time order over the turn's subtree (a trace: every span of the trace, those whose parent
never arrived included, with a note):

* ``model_call``: a model call (wrappers collapsed as :meth:`.SpanTree.collapsed_into` does),
  its output text and the tool calls it requested (:mod:`.trajectory_read`);
* ``tool_call``: a tool execution with its name, arguments, result and error;
* ``retrieval``: a retriever span, or a span :mod:`.inference` recognises by its documents;
* ``agent``: a sub-agent invoked inside the turn (``handoff_from`` set when it follows a
  sibling agent of another name: control passed from one to the other);
* ``handoff``: a hand-off span (OpenAI Agents SDK) or a ``transfer_to_<agent>`` tool call;
* ``plan``: a span of the semconv ``plan`` operation, its output as the plan.

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

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild import target_text as texts
from spanjudge.evaluators._rebuild.context import cap
from spanjudge.evaluators._rebuild.dialects import message_text as text
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import Target
from spanjudge.evaluators._rebuild.trajectory_links import (
    Links,
    known_agents,
    norm,
    owner_of,
    tool_result,
)
from spanjudge.evaluators._rebuild.trajectory_read import (
    MAX_STEP_CHARS,
    ToolDefinition,
    ToolRequest,
    as_text,
    bounded,
    call_arguments,
    error_of,
    handoff_span,
    offer_tools,
    requested_tool_calls,
    short,
)
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

StepKind = Literal["model_call", "tool_call", "retrieval", "agent", "handoff", "plan"]


@dataclass(slots=True)
class Step:
    """One thing the agent did. ``index`` is its position (0-based); ``agent`` the agent it ran
    under; ``arguments``/``result``: a tool call's, a retrieval's document texts (``result``),
    a model call's or a sub-agent's output text, a plan's text; ``tool_calls``: what a model
    call requested; ``handoff_from``/``handoff_to``: the agents of a hand-off."""

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

    def describe(self, limit: int = 120) -> str:
        """One line: ``step 2 tool_call lookup_order {"id": 7} -> error: KeyError``."""
        head = f"step {self.index} {self.kind} {self.name}"
        if self.kind == "tool_call" and self.arguments is not None:
            head += " " + short(as_text(self.arguments), limit)
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
        text_in, text_out = texts.turn_text(span, tree, {})
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
    text_in = texts.first_text([root, *agents, *llms], "input", {})
    text_out = texts.first_text([root, *reversed(agents), *reversed(llms)], "actual_output", {})
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
    error = error_of(span)
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
        name = tool.name if tool is not None and tool.name.strip() else _agent_name(span)
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


def _task_text(tree: SpanTree, scope: list[SpanRecord], text_in: str | None) -> str | None:
    """The turn's input, unless it is data (a JSON object or list: a framework's
    configuration or state, not the user's words): then the first model call's input."""
    if text_in is None or not isinstance(text.maybe_json(text_in), dict | list):
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
