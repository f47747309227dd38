"""The retrieval context and the tool calls of a case, gathered from the spans in its scope.

Sources, in order: the document texts of the retrievals in scope (``retrieval``: retriever
spans of any dialect, and spans :mod:`.inference` recognises by the documents they return;
equal texts are kept once); with the fallback on, the results of the tool calls in scope
(``tool_results``), then the system instructions the model was given (``system_instructions``).
The whole context shares one size budget (:data:`MAX_FIELD_CHARS`), so a judge prompt stays
bounded; at most
:data:`MAX_TOOL_CALLS` tool calls are kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._judge.test_case import ToolCall
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.dialects.message_text import document_texts
from spanjudge.evaluators._rebuild.dialects.text_shapes import PROMPT_BLOCK_RULE
from spanjudge.evaluators._rebuild.dialects.tool_calls import FINAL_ANSWER_TOOL
from spanjudge.evaluators._rebuild.dialects.view import GenAIView
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.tracer import _attributes as attrs

MAX_FIELD_CHARS = 100_000
"""Longest rebuilt text field (input, output, each turn, retrieval context in total)."""
MAX_TOOL_CALLS = 200
CONTEXT_SOURCES = ("retrieval", "tool_results", "system_instructions")
_TRUNCATED = attrs.TRUNCATION_MARKER


def context_of(
    tree: SpanTree,
    scope: list[SpanRecord],
    models: list[SpanRecord],
    notes: dict[str, str],
    where: str,
    truncated: list[str],
    fallback: bool,
    found_by: dict[str, str] | None = None,
    in_prompt: list[str] | None = None,
) -> tuple[list[str] | None, str | None]:
    """The retrieval context and where it came from (see the module docstring); ``found_by``
    receives how (``"retrieval_context"``: the spans and the rule or dialect that read them).
    ``in_prompt``: documents the prompt carried in a marked block (``<memory>...``), the
    retrieval context when no retrieval in scope has text."""
    found_by = {} if found_by is None else found_by
    found = retrieval_context(tree, scope, notes, where, truncated, found_by)
    if found is not None:
        return found, "retrieval"
    if in_prompt:
        notes.pop("retrieval_context", None)
        found_by["retrieval_context"] = f"{PROMPT_BLOCK_RULE} ({len(in_prompt)} block(s))"
        return _bounded(list(dict.fromkeys(in_prompt)), truncated), "retrieval"
    if not fallback:
        return None, None
    tools = [s for s in scope if tree.kind(s) == "tool" and not _final_answer_tool(s)]
    results = [text for s in tools for text in _result_texts(read_span(s))]
    if results:
        notes.pop("retrieval_context", None)
        found_by["retrieval_context"] = f"fallback: results of {len(tools)} tool call(s)"
        return _bounded(results, truncated), "tool_results"
    systems = [v.system_text for v in map(read_span, models) if v.system_text]
    if systems:
        notes.pop("retrieval_context", None)
        found_by["retrieval_context"] = "fallback: the model's system instructions"
        return _bounded(list(dict.fromkeys(systems)), truncated), "system_instructions"
    return None, None


def _final_answer_tool(span: SpanRecord) -> bool:
    """A final-answer tool returns the answer itself: never evidence for it."""
    tool = read_span(span).tool
    return tool is not None and bool(FINAL_ANSWER_TOOL.match(tool.name.strip()))


def _result_texts(view: GenAIView) -> list[str]:
    result = view.tool.result if view.tool is not None else None
    if result is None:
        return []
    texts = document_texts(result)
    if texts:
        return texts
    return [json.dumps(result, ensure_ascii=False, default=str)]


def retrieval_context(
    tree: SpanTree,
    scope: list[SpanRecord],
    notes: dict[str, str],
    where: str,
    truncated: list[str],
    found_by: dict[str, str] | None = None,
) -> list[str] | None:
    """Document texts of the retrievals in ``scope`` (equal texts once), or ``None`` with a
    note saying why."""
    found = [(s, hit) for s in scope if (hit := tree.retrieval(s)) is not None]
    if not found:
        notes.setdefault("retrieval_context", f"no retriever spans in {where}")
        return None
    retrievers = [read_span(s) for s, _ in found]
    texts: list[str] = []
    how: list[str] = []
    for (span, (docs, rule)), view in zip(found, retrievers, strict=True):
        got = [d.text for d in docs if d.text and d.text.strip()]
        if not got and "retrieval_context" in view.notes:
            notes.setdefault("retrieval_context", view.notes["retrieval_context"])
        if got:
            how.append(f"span {span.span_id} ({span.name!r}): {rule}")
        texts.extend(got)
    texts = list(dict.fromkeys(texts))
    if texts and found_by is not None:
        found_by["retrieval_context"] = "; ".join(how)
    if not texts:
        off = next((v.capture_off for v in retrievers if v.capture_off), None)
        notes.setdefault(
            "retrieval_context",
            f"{len(retrievers)} retriever span(s) in {where} carry no document text"
            + (f": {off}" if off else " (only document ids and scores)"),
        )
        return None
    return _bounded(texts, truncated)


def _bounded(texts: list[str], truncated: list[str]) -> list[str]:
    # the whole context shares one size budget, so a judge prompt stays bounded
    out: list[str] = []
    room = MAX_FIELD_CHARS
    for text in texts:
        if room <= 0:
            truncated.append("retrieval_context")
            break
        if len(text) > room:
            out.append(text[:room] + _TRUNCATED.format(dropped=len(text) - room))
            truncated.append("retrieval_context")
            break
        out.append(text)
        room -= len(text)
    return out


def _tool_output(value: Any) -> Any:
    """Tool results are free-form; keep them bounded without dropping the call."""
    if isinstance(value, str):
        return value if len(value) <= MAX_FIELD_CHARS else cap(value, "tool", [])
    try:
        size = len(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return str(value)[:MAX_FIELD_CHARS]
    if size > MAX_FIELD_CHARS:
        return cap(json.dumps(value, default=str), "tool", [])
    return value


def tools_called(
    tree: SpanTree, scope: list[SpanRecord], notes: dict[str, str], where: str
) -> list[ToolCall] | None:
    calls: list[ToolCall] = []
    for span in scope:
        if tree.kind(span) != "tool":
            continue
        view = read_span(span)
        if view.tool is None or not view.tool.name.strip():
            continue
        if len(calls) >= MAX_TOOL_CALLS:
            notes.setdefault(
                "tools_called", f"more than {MAX_TOOL_CALLS} tool calls in {where}; kept the first"
            )
            break
        args = view.tool.arguments
        params: dict[str, Any] | None
        if args is None:
            params = None
        elif isinstance(args, Mapping):
            params = {str(k): v for k, v in args.items()}
        else:
            params = {"value": args}
        if params is not None and len(json.dumps(params, default=str)) > MAX_FIELD_CHARS:
            params = {"value": cap(json.dumps(params, default=str), "tool", [])}
        calls.append(
            ToolCall(
                name=view.tool.name,
                input_parameters=params,
                output=_tool_output(view.tool.result),
                description=view.tool.description,
            )
        )
    if not calls:
        notes.setdefault("tools_called", f"no tool spans in {where}")
        return None
    return calls


def tools_from_messages(steps: Sequence[Any]) -> list[ToolCall] | None:
    """The tool calls of trajectory steps read from tool messages (tools without spans of
    their own), as the case's ``tools_called``; ``None`` when there are none."""
    calls = []
    for step in steps[:MAX_TOOL_CALLS]:
        if getattr(step, "read_from", None) is None or not str(step.name).strip():
            continue
        args = step.arguments
        params = {str(k): v for k, v in args.items()} if isinstance(args, Mapping) else None
        if params is None and args is not None:
            params = {"value": args}
        calls.append(ToolCall(name=step.name, input_parameters=params, output=step.result))
    return calls or None


def cap(text: str, name: str, truncated: list[str]) -> str:
    """``text`` cut at :data:`MAX_FIELD_CHARS` with a visible marker (``name`` noted)."""
    if len(text) <= MAX_FIELD_CHARS:
        return text
    truncated.append(name)
    return text[:MAX_FIELD_CHARS] + _TRUNCATED.format(dropped=len(text) - MAX_FIELD_CHARS)
