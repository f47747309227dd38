"""Reading rules that need the span tree, for shapes no dialect describes.

The dialects read one span at a time. These rules read a trace as a tree, so a framework we
were never shown still degrades gracefully:

* **Turn inference.** In a trace where no span is marked as an agent, the top-most span that
  encloses model calls is the turn (an ``agent`` target): a workflow, a chain or an HTTP handler
  around the model calls. Rule name: ``"top span enclosing model calls"``.
* **One logical operation, one target** (:func:`collapse`). A span of kind ``llm`` or ``agent``
  is a *wrapper* when the only spans of its kind below it form one chain, and, for a model call,
  the models agree (or one is unknown); for an agent, it makes no model call outside the inner
  agent. A framework's ``achat`` span around the client library's span, a run span around its
  agent span: each chain of wrappers is one operation, evaluated once, on the member that
  carries text of its own (the innermost such), else the innermost member. Two sub-agents side
  by side, or an agent that calls the model itself and also a sub-agent, are not wrappers.
  Inside an agent's turn, an agent span that wraps a single model call and nothing else (a
  graph framework's node span) or has neither a model call nor text of its own (a hand-off tool
  marked as an agent) is a step of that turn, folded into it; a sub-agent makes tool calls,
  retrievals or several model calls of its own.
* **Retrieval inference** (:func:`returned_documents`). A span no dialect calls a retriever
  (kind unknown or ``chain``) is one when what it returns is a list of documents: records with
  a text beside an id, a score or metadata, in any output-like attribute or event; or any list
  of texts when its name or operation says search, retrieval or memory.

Example::

    tree = SpanTree(spans)
    tree.kind(workflow_root)        # "agent" when it is the inferred turn
    tree.how_kind(workflow_root)    # "top span enclosing model calls"
    tree.collapsed_into(outer_llm)  # the inner model-call span that stands for both
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.dialects.message_text import (
    document_texts,
    looks_like_document,
    maybe_json,
    nonempty,
)
from spanjudge.evaluators._rebuild.dialects.tool_calls import requested_tool_calls
from spanjudge.evaluators._rebuild.dialects.view import Document, ViewKind

if TYPE_CHECKING:
    from spanjudge.evaluators._rebuild.scope import SpanTree

Key = tuple[str, str]
TURN_RULE = "top span enclosing model calls"
HANDOFF_TURN_RULE = "span around agents that hand off"
RETRIEVAL_RULE = "returns documents"
COLLAPSIBLE = ("llm", "agent")

# output-like attribute keys and event names, by suffix: where a span's return value sits
_OUTPUT_KEYS = ("output", "output.value", "outputs", "result", "results", "documents", "records")
_SEARCH_NAME = re.compile(
    r"(?i)(retriev|memory|vector|similarity|semantic[ _.-]?search|knowledge|search|recall|lookup)"
)
_VECTOR_DBS = frozenset(
    {"chroma", "pinecone", "qdrant", "weaviate", "milvus", "lancedb", "pgvector", "faiss"}
)


def key(span: SpanRecord) -> Key:
    return (span.trace_id, span.span_id)


def inferred_turns(tree: SpanTree) -> dict[Key, str]:
    """Per trace without an agent span: the top-most spans that enclose model calls; per trace
    with agents: the span around top-most agents that hand off to each other."""
    by_trace: dict[str, list[SpanRecord]] = {}
    for span in tree.spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    turns: dict[Key, str] = {}
    for spans in by_trace.values():
        kinds = [tree.dialect_kind(s) for s in spans]
        if "agent" in kinds:
            turns.update(_handing_agents(tree, spans, kinds))
            continue
        if "llm" not in kinds:
            continue
        for span, kind in zip(spans, kinds, strict=True):
            if kind != "llm":
                continue
            top = None
            for ancestor in tree.ancestors(span):
                top = ancestor
            if top is not None and tree.dialect_kind(top) != "llm":
                turns[key(top)] = TURN_RULE
    return turns


def _handing_agents(
    tree: SpanTree, spans: list[SpanRecord], kinds: list[ViewKind | None]
) -> dict[Key, str]:
    """The parent of two top-most agent spans (no agent above them), one after the other,
    when the earlier one names the later one in its subtree (a span's name ends with its name,
    or a tool argument is its name): control passed between them, so the turn is the span
    around both."""
    agents = {key(s) for s, k in zip(spans, kinds, strict=True) if k == "agent"}
    top = sorted(
        (
            s
            for s, k in zip(spans, kinds, strict=True)
            if k == "agent" and not any(key(a) in agents for a in tree.ancestors(s))
        ),
        key=lambda s: (s.start_time_unix_nano, s.span_id),
    )
    if len(top) < 2:
        return {}
    turns: dict[Key, str] = {}
    # each agent against the one that acted just before it beside it: a chain of hand-offs is
    # found pair by pair, and a trace of many turns side by side is read once, not pairwise
    last: dict[str | None, SpanRecord] = {}
    for later in top:
        parent = tree.parent(later)
        earlier = last.get(later.parent_span_id)
        last[later.parent_span_id] = later
        if parent is None or earlier is None or key(parent) in turns:
            continue
        if _names(tree, earlier, _agent_name(later)):
            turns[key(parent)] = HANDOFF_TURN_RULE
    return turns


def _agent_name(span: SpanRecord) -> str:
    return _norm(read_span(span).agent_name or span.name)


def _names(tree: SpanTree, agent: SpanRecord, wanted: str) -> bool:
    """Whether a span inside ``agent`` names the agent ``wanted`` (normalised)."""
    if not wanted or wanted == _agent_name(agent):
        return False
    for span in tree.subtree(agent):
        if _norm(span.name).endswith("_" + wanted):
            return True
        tool = read_span(span).tool
        arguments = maybe_json(tool.arguments) if tool is not None else None
        if isinstance(arguments, Mapping) and any(
            isinstance(v, str) and _norm(v) == wanted for v in arguments.values()
        ):
            return True
    return False


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def collapse(tree: SpanTree, kind: str) -> dict[Key, SpanRecord]:
    """For each span of ``kind`` that is one of several describing one operation and is not the
    one kept: the span kept in its place (see the module docstring)."""
    members = [s for s in tree.spans if tree.kind(s) == kind]
    if len(members) < 2:
        return {}
    wanted = {key(s) for s in members}
    inner: dict[Key, list[SpanRecord]] = {}
    for span in members:
        parent = next((a for a in tree.ancestors(span) if key(a) in wanted), None)
        if parent is not None:
            inner.setdefault(key(parent), []).append(span)
    if not inner:
        return {}
    by_key = {key(s): s for s in members}
    wrapped: dict[Key, SpanRecord] = {}  # wrapper -> the one span it wraps
    for outer_key, below in inner.items():
        if len(below) == 1 and _same_operation(tree, by_key[outer_key], below[0], kind):
            wrapped[outer_key] = below[0]
    out: dict[Key, SpanRecord] = {}
    inside = {key(s) for s in wrapped.values()}
    for top_key in wrapped:
        if top_key in inside:
            continue  # not the top of its chain
        chain = [by_key[top_key]]
        while key(chain[-1]) in wrapped:
            chain.append(wrapped[key(chain[-1])])
        kept = _kept(chain)
        for span in chain:
            if span is not kept:
                out[key(span)] = kept
    if kind == "agent":
        _steps_of_turns(tree, members, wanted, out)
    return out


def _steps_of_turns(
    tree: SpanTree, members: list[SpanRecord], agents: set[Key], out: dict[Key, SpanRecord]
) -> None:
    """Agent spans inside another agent's turn that are steps of it, not sub-agents: one that
    wraps a single model call and nothing else (a graph framework's node span, LangGraph's
    ``agent`` node), or one with no model call and no text of its own (a hand-off tool a
    library marked as an agent). Each is folded into the span kept for its enclosing agent."""
    for span in members:
        if key(span) in out:
            continue
        enclosing = next((a for a in tree.ancestors(span) if key(a) in agents), None)
        if enclosing is None:
            continue
        below = tree.subtree(span)
        calls = [s for s in below if tree.kind(s) == "llm"]
        others = [s for s in below if tree.kind(s) in ("tool", "agent", "retriever")]
        stepwise = (len(calls) == 1 and not others) or (not calls and not _own_text(span))
        if stepwise or (not calls and not others and _requested(tree, enclosing, span)):
            kept = out.get(key(enclosing), enclosing)
            kept = out.get(key(kept), kept)
            if kept is not span:  # its enclosing span is a wrapper kept as this very span
                out[key(span)] = kept


def _requested(tree: SpanTree, turn: SpanRecord, span: SpanRecord) -> bool:
    """Whether a model call of ``turn`` before ``span`` requested a tool of ``span``'s name
    (the tool's execution, marked as an agent by its library)."""
    wanted = _agent_name(span)
    return any(
        tree.kind(s) == "llm"
        and s.start_time_unix_nano <= span.start_time_unix_nano
        and any(_norm(c.name) == wanted for c in requested_tool_calls(s))
        for s in tree.subtree(turn)
    )


def _same_operation(tree: SpanTree, outer: SpanRecord, inner: SpanRecord, kind: str) -> bool:
    if kind == "llm":
        a, b = read_span(outer).model, read_span(inner).model
        return a is None or b is None or _model_base(a) == _model_base(b)
    inside = {key(s) for s in tree.subtree(inner)}
    return all(key(s) in inside for s in tree.subtree(outer) if tree.kind(s) == "llm")


def _model_base(model: str) -> str:
    # "openai/gpt-4o-mini" and "gpt-4o-mini-2024-07-18" name the model "gpt-4o-mini" calls
    name = model.rsplit("/", 1)[-1].lower()
    return re.sub(r"-\d{4}-\d{2}-\d{2}$", "", name)


def _kept(chain: list[SpanRecord]) -> SpanRecord:
    with_text = [s for s in chain if _own_text(s)]
    return (with_text or chain)[-1]


def _own_text(span: SpanRecord) -> bool:
    view = read_span(span)
    return view.input_text is not None or view.output_text is not None


def returned_documents(span: SpanRecord) -> tuple[list[Document], str] | None:
    """The documents a span of unknown or ``chain`` kind returns, and where they were found,
    when it reads as a retrieval (see the module docstring); else ``None``."""
    searchy = bool(_SEARCH_NAME.search(span.name)) or _vector_db(span.attributes)
    for where, value in _outputs(span):
        parsed = maybe_json(value)
        items = _items(parsed)
        if not items:
            continue
        docs = [looks_like_document(i) for i in items]
        if all(docs) or (searchy and any(docs)):
            texts = document_texts(items)
        elif searchy and all(isinstance(i, str) for i in items):
            texts = [t for t in items if nonempty(t)]
        else:
            continue
        if texts:
            return [Document(t) for t in texts], where
    return None


def _items(parsed: Any) -> list[Any] | None:
    if isinstance(parsed, Mapping):
        for name in ("documents", "docs", "results", "records", "memories", "nodes", "output"):
            inner = parsed.get(name)
            if isinstance(inner, list):
                return inner
        return None
    return list(parsed) if isinstance(parsed, list | tuple) and parsed else None


def _outputs(span: SpanRecord) -> list[tuple[str, Any]]:
    found = [
        (f"attribute {k}", v)
        for k, v in span.attributes.items()
        if isinstance(v, str | list | tuple) and k.endswith(_OUTPUT_KEYS)
    ]
    for event in span.events:
        if event.name.endswith(_OUTPUT_KEYS) or _SEARCH_NAME.search(event.name):
            found.extend(
                (f"event {event.name}", v)
                for v in event.attributes.values()
                if isinstance(v, str | list | tuple)
            )
    return found


def _vector_db(attributes: Mapping[str, Any]) -> bool:
    system = attributes.get("db.system.name", attributes.get("db.system"))
    return isinstance(system, str) and system.lower() in _VECTOR_DBS
