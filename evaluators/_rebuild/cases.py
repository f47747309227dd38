"""Rebuild deepeval-style test cases from stored spans, through their canonical reading.

Fields, per target (every span read by
:func:`~spanjudge.evaluators._rebuild.dialects.read_span`):

* ``input`` / ``actual_output``: the span's question and answer, whatever dialect wrote them
  (trace targets: the root's, else the first turn's input and the last turn's output);
* ``retrieval_context``: the document texts of the retrievals in the target's scope
  (:class:`~spanjudge.evaluators._rebuild.scope.SpanTree`): an agent turn's subtree, what
  precedes an LLM call in its turn at any depth, a whole trace. When there is no retrieved text, a
  fallback (``Rule(context_fallback=True)``, the default) takes the results of the tool calls in
  scope, then the system instructions the model was given; the case's
  ``metadata["context_source"]`` says which (``retrieval``, ``tool_results``,
  ``system_instructions``) and the result carries it as ``spanjudge.evaluation.context_source``;
* ``tools_called``: the tool calls in scope;
* conversations: one user and one assistant turn per turn span, in time order.

How each field was found goes into ``metadata["found_by"]`` (field -> the span and the dialect
attribute, event or inference rule that gave it; ``"target"`` when the target itself was
inferred or stands for wrapper spans), and the fields that an inference rule of
:mod:`.inference` gave (an inferred turn, an inferred retrieval, an agent's text taken from its
model calls) into ``metadata["inferred_fields"]``. ``Rule(inferred_fields=False)`` skips a case
whose required fields were inferred.

Limits: a raw value longer than
:data:`~spanjudge.evaluators._rebuild.dialects.message_text.MAX_RAW_CHARS` is not parsed; each
rebuilt text field, and the retrieval context in total, is cut at :data:`MAX_FIELD_CHARS` with a
visible marker (``metadata["truncated_fields"]`` lists them); at most :data:`MAX_TOOL_CALLS` tool
calls and :data:`MAX_TURNS` turns (the most recent) are kept. Nothing here raises on bad spans:
every problem ends as a :class:`Skip` with a reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn
from spanjudge.evaluators._rebuild.context import (
    MAX_FIELD_CHARS,
    MAX_TOOL_CALLS,
    cap,
    context_of,
    retrieval_context,
    tools_called,
    tools_from_messages,
)
from spanjudge.evaluators._rebuild.dialects import fallback, read_span
from spanjudge.evaluators._rebuild.dialects.message_text import MAX_RAW_CHARS
from spanjudge.evaluators._rebuild.inference import RETRIEVAL_RULE
from spanjudge.evaluators._rebuild.plausibility import IMPLAUSIBLE_FIELD, refusal_of
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.target_text import first_text, turn_text
from spanjudge.evaluators._rebuild.targets import Skip, Target, turn_spans
from spanjudge.evaluators._rebuild.trajectory import (
    READ_FROM_TOOL_MESSAGE,
    trace_trajectory,
    trajectory_of,
)

if TYPE_CHECKING:
    from spanjudge.evaluators._plan.rules import Rule

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_RAW_CHARS",
    "MAX_TOOL_CALLS",
    "MAX_TURNS",
    "build_case",
    "default_case",
]

MAX_TURNS = 1_000
_TEXT_FIELDS = ("input", "actual_output")

Case = LLMTestCase | ConversationalTestCase


def build_case(rule: Rule, target: Target, spans: list[SpanRecord]) -> Case | Skip:
    """The test case the rule's metric evaluates for ``target``, or a :class:`Skip`.

    Uses ``rule.build_case`` when given (its exceptions become ``Skip("build_case failed: ...")``),
    else the built-in rebuild. A case missing a field the metric requires is a Skip naming the
    field and why, e.g. ``"missing retrieval_context: no retriever spans in this turn"``; when
    the instrumentation was told not to capture content, the reason names its setting.
    Never raises.
    """
    notes: dict[str, str] = {}
    try:
        if rule.build_case is not None:
            try:
                built = rule.call_build_case(spans, target)
            except Exception as exc:
                return Skip(f"build_case failed: {type(exc).__name__}: {_short(str(exc))}")
            if isinstance(built, Skip):
                return built
            if not isinstance(built, LLMTestCase | ConversationalTestCase):
                return Skip(
                    f"build_case failed: returned {type(built).__name__}, expected a test case"
                )
            case: Case | Skip = built
        else:
            case = default_case(
                target, spans, notes, context_fallback=getattr(rule, "context_fallback", True)
            )
        if isinstance(case, Skip):
            return case
        missing = _missing(rule.metric, case)
        if not missing and not getattr(rule, "inferred_fields", True):
            refused = _inferred_required(rule.metric, case)
            if refused:
                return Skip(refused, [])
        if not missing and rule.build_case is None:
            required = getattr(rule.metric, "required_fields", None) or _TEXT_FIELDS
            refusal = refusal_of(case, required)
            if refusal is not None:
                return Skip(refusal.reason, [], IMPLAUSIBLE_FIELD, refusal)
    except Exception as exc:  # a bug or an unforeseen span shape: skip this target, keep going
        return Skip(f"rebuild failed: {type(exc).__name__}: {_short(str(exc))}")
    if missing:
        default = (
            "build_case gave none" if rule.build_case is not None else "not found in the spans"
        )
        reason = "; ".join(f"missing {name}: {notes.get(name, default)}" for name in missing)
        return Skip(reason, missing)
    return case


def default_case(
    target: Target,
    spans: list[SpanRecord],
    notes: dict[str, str] | None = None,
    *,
    context_fallback: bool = True,
) -> Case | Skip:
    """The built-in rebuild (no metric check). ``notes`` receives, per field that could not be
    filled, why; an ``input``/``actual_output`` that was not found is the empty string."""
    notes = {} if notes is None else notes
    tree = SpanTree(spans)
    if target.target_type == "conversation":
        return _conversation_case(target, spans, tree, notes)
    span = target.span
    if span is None:
        return Skip(f"the {target.target_type} target has no span to rebuild from")
    found_by: dict[str, str] = {}
    if target.target_type == "trace":
        trace_spans = [s for s in spans if s.trace_id == span.trace_id]
        ordered = sorted(trace_spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
        agents = [s for s in ordered if tree.kind(s) == "agent"]
        llms = [s for s in ordered if tree.kind(s) == "llm" and tree.collapsed_into(s) is None]
        # the root speaks for the trace; if it captured nothing, the first turn's input and
        # the last turn's output do
        text_in = first_text([span, *agents, *llms], "input", notes, found_by, span)
        text_out = first_text(
            [span, *reversed(agents), *reversed(llms)], "actual_output", notes, found_by, span
        )
        scope = [s for s in trace_spans if s.span_id != span.span_id]
        where = "this trace"
        models = llms
    else:
        scope = tree.scope_of(span)
        text_in, text_out = turn_text(span, tree, notes, found_by)
        where = (
            "this agent turn"
            if target.target_type == "agent"
            else "this turn (before the LLM call)"
        )
        models = (
            [span]
            if target.target_type == "llm"
            else [s for s in scope if tree.kind(s) == "llm" and tree.collapsed_into(s) is None]
        )
    truncated: list[str] = []
    in_prompt = next((d for d in (read_span(s).prompt_documents for s in [span, *models]) if d), [])
    retrieval, source = context_of(
        tree, scope, models, notes, where, truncated, context_fallback, found_by, in_prompt
    )
    if text_in and retrieval and source == "retrieval":
        text_in = _without_documents(text_in, retrieval, found_by)
    tools = tools_called(tree, scope, notes, where)
    metadata: dict[str, Any] = {
        "target_type": target.target_type,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "dialect": read_span(span).dialect,
    }
    _target_found_by(span, tree, found_by)
    metadata["found_by"] = found_by
    inferred = _inferred(found_by, span)
    if inferred:
        metadata["inferred_fields"] = inferred
    if source is not None:
        metadata["context_source"] = source
    text_in = cap((text_in or "").strip(), "input", truncated)
    text_out = cap((text_out or "").strip(), "actual_output", truncated)
    if truncated:
        metadata["truncated_fields"] = truncated
    trajectory = (
        trace_trajectory(tree, span.trace_id)
        if target.target_type == "trace"
        else trajectory_of(tree, span)
    )
    if tools is None:
        tools = tools_from_messages(trajectory.tool_calls)
        if tools:
            notes.pop("tools_called", None)
            found_by["tools_called"] = f"{READ_FROM_TOOL_MESSAGE} ({len(tools)} call(s))"
    return LLMTestCase(
        input=text_in,
        actual_output=text_out,
        retrieval_context=retrieval,
        tools_called=tools,
        metadata=metadata,
        name=span.name,
        trajectory=trajectory,
    )


_MIN_DOCUMENT_CHARS = 20  # shorter texts are found inside prompts by chance


def _without_documents(text: str, documents: list[str], found_by: dict[str, str]) -> str:
    """The input without the retrieved documents a framework pasted into the prompt (the
    documents found elsewhere in the turn are context, not the question); as given when none
    is in it, or nothing else would be left."""
    rest, moved = text, 0
    for document in documents:
        doc = document.strip()
        if len(doc) >= _MIN_DOCUMENT_CHARS and doc in rest:
            rest, moved = rest.replace(doc, ""), moved + 1
    if not moved:
        return text
    rest = "\n\n".join(p.strip() for p in rest.split("\n\n") if p.strip())
    if not rest:
        return text
    how = found_by.get("input", "attributes")
    found_by["input"] = f"{how}, rule: retrieved documents taken out of the prompt ({moved})"
    return rest


def _target_found_by(span: SpanRecord, tree: SpanTree, found_by: dict[str, str]) -> None:
    how = tree.how_kind(span)
    if how is None and read_span(span).dialect == "generic":
        how = fallback.RULE
    wrappers = tree.collapsed_from(span)
    parts = [f"inferred: {how}"] if how else []
    if wrappers:
        ids = ", ".join(f"{w.span_id} ({w.name!r})" for w in wrappers)
        parts.append(f"one operation with wrapper span(s) {ids}")
    if parts:
        found_by["target"] = "; ".join(parts)


def _inferred(found_by: dict[str, str], span: SpanRecord) -> list[str]:
    """Fields an inference rule gave: all of them under an inferred target; text taken from
    another span than the target's own; a retrieval recognised by what it returns."""
    if found_by.get("target", "").startswith("inferred"):
        return [k for k in found_by if k != "target"]
    own = f"span {span.span_id} "
    return [
        k
        for k, how in found_by.items()
        if k != "target"
        and (
            "inferred:" in how
            or RETRIEVAL_RULE in how
            or (
                (k in ("input", "actual_output") and how.startswith("span "))
                and not how.startswith(own)
            )
        )
    ]


def _inferred_required(metric: Any, case: Case) -> str | None:
    if not isinstance(case, LLMTestCase):
        return None
    metadata = case.metadata or {}
    required = getattr(metric, "required_fields", ("input", "actual_output"))
    hits = [f for f in metadata.get("inferred_fields", ()) if f in required]
    if not hits:
        return None
    found_by = metadata.get("found_by", {})
    target = found_by.get("target")
    detail = "; ".join(f"{f}: {target or found_by.get(f, '?')}" for f in hits)
    return f"inferred_fields = false and {', '.join(hits)} inferred ({_short(detail, 300)})"


def _conversation_case(
    target: Target, spans: list[SpanRecord], tree: SpanTree, notes: dict[str, str]
) -> ConversationalTestCase | Skip:
    turns_of = list(target.turn_spans) or turn_spans(target.target_id, spans)
    dropped = max(0, len(turns_of) - MAX_TURNS // 2)
    turns_of = turns_of[dropped:]  # two turns per span; keep the most recent
    turns: list[Turn] = []
    truncated: list[str] = []
    empty = 0
    why: list[str] = []
    for position, span in enumerate(turns_of):
        local: dict[str, str] = {}
        text_in, text_out = turn_text(span, tree, local)
        if not text_in and not text_out:
            empty += 1
            why.extend(local.values())
            continue
        if text_in:
            turns.append(
                Turn(
                    role="user",
                    content=cap(text_in.strip(), f"turns[{position}].user", truncated),
                )
            )
        if text_out:
            scope = tree.subtree(span)
            where = "this agent turn"
            turns.append(
                Turn(
                    role="assistant",
                    content=cap(text_out.strip(), f"turns[{position}].assistant", truncated),
                    retrieval_context=retrieval_context(tree, scope, {}, where, truncated),
                    tools_called=tools_called(tree, scope, {}, where),
                    metadata={"trace_id": span.trace_id, "span_id": span.span_id},
                    trajectory=trajectory_of(tree, span),
                )
            )
    if not turns:
        reasons = _short("; ".join(sorted(set(why))), 500)
        return Skip(
            f"missing turns: none of the {len(turns_of)} turn span(s) of conversation "
            f"{target.target_id!r} had input or output text" + (f" ({reasons})" if reasons else ""),
            ["turns"],
        )
    metadata: dict[str, Any] = {
        "target_type": "conversation",
        "conversation_id": target.target_id,
        "turn_spans": len(turns_of),
    }
    if empty:
        metadata["turn_spans_without_text"] = empty
    if dropped:
        metadata["turn_spans_dropped"] = dropped
    if truncated:
        metadata["truncated_fields"] = truncated
    return ConversationalTestCase(turns=turns, metadata=metadata, name=target.target_id)


def _missing(metric: Any, case: Case) -> list[str]:
    found = metric.missing_fields(case)
    missing = [str(name) for name in found] if isinstance(found, list | tuple) else []
    if isinstance(case, LLMTestCase):
        required = getattr(metric, "required_fields", ("input", "actual_output"))
        # the rebuild fills absent text with "" (the model requires a str); that is missing too
        for name in ("input", "actual_output"):
            if name in required and not getattr(case, name) and name not in missing:
                missing.append(name)
    return missing


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
