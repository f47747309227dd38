"""Find a rule's targets in stored spans and rebuild deepeval-style test cases from them.

Pure functions over :class:`~spanjudge.exporters.records.SpanRecord` lists. Nothing here raises
on bad spans: missing attributes, malformed JSON, non-string values and oversized payloads all
end as a :class:`Skip` with a reason the store and the telemetry record.

Where the fields come from (first source that yields text wins):

* ``input``: ``gen_ai.input.messages`` (semconv parts or OpenAI-style ``content``; the LAST user
  message), OpenLLMetry's ``gen_ai.prompt.N.role/content``, plain ``gen_ai.prompt``, the
  ``gen_ai.user.message`` / ``gen_ai.content.prompt`` span events, then the captured arguments
  ``spanjudge.input`` (a string, or a dict with an ``input``/``query``/``question``/... key).
* ``actual_output``: ``gen_ai.output.messages`` (assistant text parts joined), indexed or plain
  ``gen_ai.completion``, the ``gen_ai.choice`` / ``gen_ai.assistant.message`` /
  ``gen_ai.content.completion`` events, then ``spanjudge.output``.
* ``retrieval_context``: ``spanjudge.retrieval.documents.content`` (else contents inside
  ``gen_ai.retrieval.documents``) of the retriever spans in the same turn: an agent span's
  subtree; an LLM span's preceding siblings and their subtrees; the whole trace for a trace.
* ``tools_called``: tool spans in the same turn (``gen_ai.tool.name``, parsed
  ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``).

Limits: a raw attribute longer than :data:`MAX_RAW_CHARS` is not parsed (the field counts as
missing, reason "over the parse limit"); each rebuilt text field, and the retrieval context in
total, is cut at :data:`MAX_FIELD_CHARS` characters with a visible marker (the case's
``metadata["truncated_fields"]`` lists them); at most :data:`MAX_TOOL_CALLS` tool calls and
:data:`MAX_TURNS` conversation turns (the most recent) are kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from spanjudge.evaluators.online.rules import Rule
from spanjudge.evaluators.online.targets import (
    Skip,
    Target,
    is_agent_span,
    is_llm_span,
    span_kind,
)
from spanjudge.evaluators.test_case import ConversationalTestCase, LLMTestCase, ToolCall, Turn
from spanjudge.exporters.records import SpanRecord
from spanjudge.tracer import attributes as attrs

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_RAW_CHARS",
    "MAX_TOOL_CALLS",
    "MAX_TURNS",
    "Skip",
    "Target",
    "build_case",
    "conversation_target",
    "default_case",
    "find_targets",
]

MAX_FIELD_CHARS = 100_000
"""Longest rebuilt text field (input, output, each turn, retrieval context in total)."""
MAX_RAW_CHARS = 1_000_000
"""Longest raw attribute value parsed; longer ones are treated as missing."""
MAX_TOOL_CALLS = 200
MAX_TURNS = 1_000

# Attribute keys inside span events and captured payloads. They belong to the event/payload
# shapes of other instrumentations, not to span attributes, so they live here.
_EVENT_CONTENT = "content"
_EVENT_MESSAGE = "message"
_EVENT_BODY = "gen_ai.event.content"
_INPUT_KEYS = ("input", "query", "question", "message", "prompt", "user_input", "text", "content")
_OUTPUT_KEYS = (
    "output",
    "answer",
    "response",
    "content",
    "text",
    "result",
    "message",
    "completion",
)
_DOC_TEXT_KEYS = ("content", "text", "page_content", "document")
_SYSTEM_ROLES = frozenset({"system", "developer"})
_INPUT_EVENTS = (attrs.GEN_AI_USER_MESSAGE_EVENT, attrs.GEN_AI_CONTENT_PROMPT_EVENT)
_OUTPUT_EVENTS = (
    attrs.GEN_AI_CHOICE_EVENT,
    attrs.GEN_AI_ASSISTANT_MESSAGE_EVENT,
    attrs.GEN_AI_CONTENT_COMPLETION_EVENT,
)
_INDEXED = {
    prefix: re.compile(rf"^{re.escape(prefix)}\.(\d+)\.(role|content)$")
    for prefix in (attrs.GEN_AI_PROMPT, attrs.GEN_AI_COMPLETION)
}
_TRUNCATED = attrs.TRUNCATION_MARKER


# ====================================================================== targets
def find_targets(rule: Rule, spans: list[SpanRecord], *, apply_filter: bool = True) -> list[Target]:
    """The rule's targets among the spans of ONE trace, filter applied (unless
    ``apply_filter=False``), in start-time order.

    ``llm``: every LLM span; ``agent``: every agent span; ``trace``: the root span (no target
    while the root has not arrived). Conversation targets come from :func:`conversation_target`.

    Example::

        for target in find_targets(Rule(FaithfulnessMetric(), target="llm"), trace_spans):
            print(target.target_id, target.span.name)
    """
    if rule.target == "conversation":
        return []
    # our own evaluation spans live in the evaluated trace: never targets, never "the end"
    spans = [s for s in spans if attrs.GEN_AI_EVALUATION_NAME not in s.attributes]
    ordered = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    if rule.target == "trace":
        roots = [s for s in ordered if s.is_root]
        if not roots:
            return []
        root = roots[0]
        if apply_filter and not rule.matches_span(root):
            return []
        return [
            Target(
                "trace",
                root.trace_id,
                root.trace_id,
                root.span_id,
                _conversation_of(root, _index(spans)),
                root,
                root.service_name,
                max(
                    (s.end_time_unix_nano for s in spans if s.trace_id == root.trace_id),
                    default=None,
                ),
            )
        ]
    wanted = is_llm_span if rule.target == "llm" else is_agent_span
    index = _index(spans)
    targets = []
    for span in ordered:
        if wanted(span) and (not apply_filter or rule.matches_span(span)):
            targets.append(
                Target(
                    rule.target,
                    span.span_id,
                    span.trace_id,
                    span.span_id,
                    _conversation_of(span, index),
                    span,
                    span.service_name,
                    span.end_time_unix_nano,
                )
            )
    return targets


def conversation_target(conversation_id: str, spans: list[SpanRecord]) -> Target | None:
    """The conversation as one target, or ``None`` when it has no turn spans.

    Turns are the top-most agent spans carrying ``gen_ai.conversation.id`` (agent spans nested
    in another agent span of the same conversation are sub-agents, not turns); a conversation
    without agent spans falls back to its top-most LLM spans. The evaluation span goes to the
    last turn.
    """
    turns = _turn_spans(conversation_id, spans)
    if not turns:
        return None
    last = turns[-1]
    return Target(
        "conversation",
        conversation_id,
        last.trace_id,
        last.span_id,
        conversation_id,
        last,
        last.service_name,
        max(s.end_time_unix_nano for s in turns),
        tuple(turns),
    )


# ====================================================================== case building
def build_case(
    rule: Rule, target: Target, spans: list[SpanRecord]
) -> LLMTestCase | ConversationalTestCase | Skip:
    """The test case the rule's metric evaluates for ``target``, or a :class:`Skip`.

    Uses ``rule.build_case`` when given (its exceptions become ``Skip("build_case failed: ...")``),
    else the built-in rebuild. A case missing a field the metric requires is a Skip naming the
    field and why, e.g. ``"missing retrieval_context: no retriever spans in this turn"``.
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
            if not isinstance(built, (LLMTestCase, ConversationalTestCase)):
                return Skip(
                    f"build_case failed: returned {type(built).__name__}, expected a test case"
                )
            case: LLMTestCase | ConversationalTestCase | Skip = built
        else:
            case = default_case(target, spans, notes)
        if isinstance(case, Skip):
            return case
        missing = _missing(rule.metric, case, notes)
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
    target: Target, spans: list[SpanRecord], notes: dict[str, str] | None = None
) -> LLMTestCase | ConversationalTestCase | Skip:
    """The built-in rebuild (no metric check). ``notes`` receives, per field that could not be
    filled, why; an ``input``/``actual_output`` that was not found is the empty string."""
    notes = {} if notes is None else notes
    index = _index(spans)
    if target.target_type == "conversation":
        return _conversation_case(target, spans, index, notes)
    span = target.span
    if span is None:
        return Skip(f"the {target.target_type} target has no span to rebuild from")
    if target.target_type == "trace":
        trace_spans = [s for s in spans if s.trace_id == span.trace_id]
        ordered = sorted(trace_spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
        agents = [s for s in ordered if is_agent_span(s)]
        llms = [s for s in ordered if is_llm_span(s)]
        # the root speaks for the trace; if it captured nothing, the first turn's input and
        # the last turn's output do
        text_in = _first_text([span, *agents, *llms], _extract_input, notes, "input")
        text_out = _first_text(
            [span, *reversed(agents), *reversed(llms)], _extract_output, notes, "actual_output"
        )
        scope = [s for s in trace_spans if s.span_id != span.span_id]
        where = "this trace"
    else:
        text_in = _first_text([span], _extract_input, notes, "input")
        text_out = _first_text([span], _extract_output, notes, "actual_output")
        if target.target_type == "agent":
            scope = _subtree(span, index)
            where = "this agent turn"
        else:
            scope = _preceding_siblings_scope(span, index)
            where = "this turn (before the LLM call)"
    truncated: list[str] = []
    retrieval = _retrieval_context(scope, notes, where, truncated)
    tools = _tools_called(scope, notes, where)
    metadata: dict[str, Any] = {
        "target_type": target.target_type,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
    }
    text_in = _cap(text_in or "", "input", truncated)
    text_out = _cap(text_out or "", "actual_output", truncated)
    if truncated:
        metadata["truncated_fields"] = truncated
    return LLMTestCase(
        input=text_in,
        actual_output=text_out,
        retrieval_context=retrieval,
        tools_called=tools,
        metadata=metadata,
        name=span.name,
    )


def _conversation_case(
    target: Target, spans: list[SpanRecord], index: _Index, notes: dict[str, str]
) -> ConversationalTestCase | Skip:
    turn_spans = list(target.turn_spans) or _turn_spans(target.target_id, spans)
    dropped = max(0, len(turn_spans) - MAX_TURNS // 2)
    turn_spans = turn_spans[dropped:]  # two turns per span; keep the most recent
    turns: list[Turn] = []
    truncated: list[str] = []
    empty = 0
    for position, span in enumerate(turn_spans):
        local: dict[str, str] = {}
        text_in = _first_text([span], _extract_input, local, "input")
        text_out = _first_text([span], _extract_output, local, "actual_output")
        if not text_in and not text_out:
            empty += 1
            continue
        if text_in:
            turns.append(
                Turn(role="user", content=_cap(text_in, f"turns[{position}].user", truncated))
            )
        if text_out:
            scope = _subtree(span, index)
            where = "this agent turn"
            turns.append(
                Turn(
                    role="assistant",
                    content=_cap(text_out, f"turns[{position}].assistant", truncated),
                    retrieval_context=_retrieval_context(scope, {}, where, truncated),
                    tools_called=_tools_called(scope, {}, where),
                    metadata={"trace_id": span.trace_id, "span_id": span.span_id},
                )
            )
    if not turns:
        why = _short("; ".join(sorted(set(_notes_of(turn_spans)))), 500)
        return Skip(
            f"missing turns: none of the {len(turn_spans)} agent turn span(s) of conversation "
            f"{target.target_id!r} had input or output text" + (f" ({why})" if why else ""),
            ["turns"],
        )
    metadata: dict[str, Any] = {
        "target_type": "conversation",
        "conversation_id": target.target_id,
        "turn_spans": len(turn_spans),
    }
    if empty:
        metadata["turn_spans_without_text"] = empty
    if dropped:
        metadata["turn_spans_dropped"] = dropped
    if truncated:
        metadata["truncated_fields"] = truncated
    return ConversationalTestCase(turns=turns, metadata=metadata, name=target.target_id)


def _notes_of(turn_spans: list[SpanRecord]) -> Iterable[str]:
    for span in turn_spans:
        local: dict[str, str] = {}
        _first_text([span], _extract_input, local, "input")
        yield from local.values()


def _missing(
    metric: Any, case: LLMTestCase | ConversationalTestCase, notes: dict[str, str]
) -> list[str]:
    found = metric.missing_fields(case)
    missing = [str(name) for name in found] if isinstance(found, (list, tuple)) else []
    if isinstance(case, LLMTestCase):
        required = getattr(metric, "required_fields", ("input", "actual_output"))
        # the rebuild fills absent text with "" (the model requires a str); that is missing too
        for name in ("input", "actual_output"):
            if name in required and not getattr(case, name) and name not in missing:
                missing.append(name)
    return missing


# ====================================================================== span tree
_Index = dict[tuple[str, str | None], list[SpanRecord]]


def _index(spans: list[SpanRecord]) -> _Index:
    """Children by (trace id, parent span id), each list in start-time order. Also holds each
    span under (trace id, "#" + span id) for ancestor walks."""
    index: _Index = {}
    for span in sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id)):
        index.setdefault((span.trace_id, span.parent_span_id or None), []).append(span)
        index.setdefault((span.trace_id, "#" + span.span_id), []).append(span)
    return index


def _parent(span: SpanRecord, index: _Index) -> SpanRecord | None:
    if not span.parent_span_id:
        return None
    found = index.get((span.trace_id, "#" + span.parent_span_id))
    return found[0] if found else None


def _ancestors(span: SpanRecord, index: _Index) -> Iterable[SpanRecord]:
    seen = {span.span_id}
    current = _parent(span, index)
    while current is not None and current.span_id not in seen:  # guard against id cycles
        seen.add(current.span_id)
        yield current
        current = _parent(current, index)


def _subtree(span: SpanRecord, index: _Index) -> list[SpanRecord]:
    """Descendants of ``span`` (not itself), in start-time order."""
    out: list[SpanRecord] = []
    seen = {span.span_id}
    stack = [span]
    while stack:
        node = stack.pop()
        for child in index.get((node.trace_id, node.span_id), ()):
            if child.span_id not in seen:
                seen.add(child.span_id)
                out.append(child)
                stack.append(child)
    out.sort(key=lambda s: (s.start_time_unix_nano, s.span_id))
    return out


def _preceding_siblings_scope(span: SpanRecord, index: _Index) -> list[SpanRecord]:
    """Siblings that started before ``span``, and their subtrees: an LLM call's turn so far."""
    out: list[SpanRecord] = []
    for sibling in index.get((span.trace_id, span.parent_span_id or None), ()):
        if (
            sibling.span_id != span.span_id
            and sibling.start_time_unix_nano < span.start_time_unix_nano
        ):
            out.append(sibling)
            out.extend(_subtree(sibling, index))
    out.sort(key=lambda s: (s.start_time_unix_nano, s.span_id))
    return out


def _conversation_of(span: SpanRecord, index: _Index) -> str | None:
    if span.conversation_id:
        return span.conversation_id
    for ancestor in _ancestors(span, index):
        if ancestor.conversation_id:
            return ancestor.conversation_id
    return None


def _turn_spans(conversation_id: str, spans: list[SpanRecord]) -> list[SpanRecord]:
    index = _index(spans)
    ordered = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.trace_id, s.span_id))
    for wanted in (is_agent_span, is_llm_span):
        candidates = [s for s in ordered if s.conversation_id == conversation_id and wanted(s)]
        ids = {(s.trace_id, s.span_id) for s in candidates}
        top = [
            s
            for s in candidates
            if not any((a.trace_id, a.span_id) in ids for a in _ancestors(s, index))
        ]
        if top:
            return top
    return []


# ====================================================================== raw values
def _raw(span: SpanRecord, key: str, notes: dict[str, str], field_name: str) -> Any:
    """An attribute value, or None (with a note) when absent-but-bad or over the parse limit."""
    value = span.attributes.get(key)
    if isinstance(value, str) and len(value) > MAX_RAW_CHARS:
        notes.setdefault(
            field_name,
            f"{key} on span {span.span_id} is {len(value)} chars, "
            f"over the {MAX_RAW_CHARS}-char parse limit",
        )
        return None
    return value


def _json(value: Any, key: str, span: SpanRecord, notes: dict[str, str], field_name: str) -> Any:
    """Parsed JSON for a string attribute; structured values pass through; None with a note
    when the string is not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        cut = _truncated_keys(span)
        hint = " (cut by the tracer's size limit)" if key in cut else ""
        notes.setdefault(field_name, f"{key} on span {span.span_id} is not valid JSON{hint}")
        return None


def _truncated_keys(span: SpanRecord) -> set[str]:
    value = span.attributes.get(attrs.SPANJUDGE_TRUNCATED)
    if isinstance(value, (list, tuple)):
        return {str(v) for v in value}
    if isinstance(value, str):
        return {value}
    return set()


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _cap(text: str, name: str, truncated: list[str]) -> str:
    if len(text) <= MAX_FIELD_CHARS:
        return text
    truncated.append(name)
    return text[:MAX_FIELD_CHARS] + _TRUNCATED.format(dropped=len(text) - MAX_FIELD_CHARS)


def _nonempty(text: Any) -> str | None:
    return text if isinstance(text, str) and text.strip() else None


# ====================================================================== messages
def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping):
        kind = part.get("type")
        if kind not in (None, "text", "input_text", "output_text"):
            return None  # images, tool calls, reasoning: not conversation text
        for key in ("content", "text"):
            value = part.get(key)
            if isinstance(value, str):
                return value
    return None


def _message_text(message: Any) -> str | None:
    """Text of one message in any of the semconv / OpenAI / choice shapes."""
    if isinstance(message, str):
        return message
    if not isinstance(message, Mapping):
        return None
    if isinstance(message.get(_EVENT_MESSAGE), Mapping):  # {"index":0,"message":{...}} choice
        return _message_text(message[_EVENT_MESSAGE])
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [t for t in (_part_text(p) for p in parts) if t]
        return "\n".join(texts) if texts else None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [t for t in (_part_text(p) for p in content) if t]
        return "\n".join(texts) if texts else None
    text = message.get("text")
    return text if isinstance(text, str) else None


def _role(message: Any) -> str | None:
    if not isinstance(message, Mapping):
        return None
    role = message.get("role")
    if isinstance(role, str):
        return role
    inner = message.get(_EVENT_MESSAGE)
    return _role(inner) if isinstance(inner, Mapping) else None


def _as_messages(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):
        inner = value.get("messages")
        if isinstance(inner, list):
            return inner
        return [value]
    return None


def _last_user_text(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if _role(message) == "user":
            text = _nonempty(_message_text(message))
            if text:
                return text
    # no user message: the last non-system one (e.g. a bare prompt without roles)
    for message in reversed(messages):
        if _role(message) not in _SYSTEM_ROLES:
            text = _nonempty(_message_text(message))
            if text:
                return text
    return None


def _assistant_text(messages: list[Any]) -> str | None:
    texts = []
    for message in messages:
        if _role(message) in (None, "assistant", "model"):
            text = _nonempty(_message_text(message))
            if text:
                texts.append(text)
    return "\n".join(texts) if texts else None


def _indexed_messages(span: SpanRecord, prefix: str) -> list[dict[str, Any]]:
    pattern = _INDEXED[prefix]
    by_index: dict[int, dict[str, Any]] = {}
    for key, value in span.attributes.items():
        match = pattern.match(key)
        if match and isinstance(value, str):
            by_index.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [by_index[i] for i in sorted(by_index)]


def _event_text(event: Any, notes: dict[str, str], span: SpanRecord, field_name: str) -> str | None:
    a = event.attributes
    for key in (_EVENT_CONTENT, attrs.GEN_AI_PROMPT, attrs.GEN_AI_COMPLETION):
        value = a.get(key)
        if isinstance(value, str) and value.strip():
            if len(value) > MAX_RAW_CHARS:
                notes.setdefault(field_name, f"event {event.name} content is over the parse limit")
                return None
            parsed = _maybe_json(value)
            if isinstance(parsed, (list, Mapping)):
                messages = _as_messages(parsed) or []
                text = (
                    _last_user_text(messages)
                    if field_name == "input"
                    else _assistant_text(messages)
                )
                return text or value
            return value
    for key in (_EVENT_MESSAGE, _EVENT_BODY):
        value = a.get(key)
        parsed = _maybe_json(value) if isinstance(value, str) else value
        if isinstance(parsed, (Mapping, str)):
            text = _nonempty(_message_text(parsed))
            if text:
                return text
    return None


def _maybe_json(value: str) -> Any:
    stripped = value.lstrip()
    if not stripped or stripped[0] not in '[{"':
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _captured_text(
    value: Any, keys: tuple[str, ...], want_input: bool, depth: int = 0
) -> str | None:
    """Text from a captured argument/return value: a str, a dict with a known key, a message
    list; otherwise the compact JSON of the value (still meaningful to a judge)."""
    if value is None or depth > 4:
        return None
    if isinstance(value, str):
        return _nonempty(value)
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, Mapping):
        if isinstance(value.get("messages"), list):
            msgs = value["messages"]
            text = _last_user_text(msgs) if want_input else _assistant_text(msgs)
            if text:
                return text
        for key in keys:
            if key in value:
                text = _captured_text(value[key], keys, want_input, depth + 1)
                if text:
                    return text
        if len(value) == 1:
            return _captured_text(next(iter(value.values())), keys, want_input, depth + 1)
        # captured keyword arguments such as {"user_msg": "...", "history": [...], "k": 3}:
        # a lone text argument is the input
        texts = [v for v in value.values() if isinstance(v, str) and v.strip()]
        if len(texts) == 1:
            return texts[0]
    if isinstance(value, list):
        if value and all(isinstance(m, Mapping) and "role" in m for m in value):
            text = _last_user_text(value) if want_input else _assistant_text(value)
            if text:
                return text
        if len(value) == 1:
            return _captured_text(value[0], keys, want_input, depth + 1)
    if not value:
        return None
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return None


def _extract(span: SpanRecord, notes: dict[str, str], want_input: bool) -> str | None:
    field_name = "input" if want_input else "actual_output"
    pick = _last_user_text if want_input else _assistant_text
    messages_key = attrs.GEN_AI_INPUT_MESSAGES if want_input else attrs.GEN_AI_OUTPUT_MESSAGES
    legacy_key = attrs.GEN_AI_PROMPT if want_input else attrs.GEN_AI_COMPLETION
    captured_key = attrs.SPANJUDGE_INPUT if want_input else attrs.SPANJUDGE_OUTPUT

    # 1. semconv messages
    raw = _raw(span, messages_key, notes, field_name)
    if raw is not None:
        parsed = _json(raw, messages_key, span, notes, field_name)
        messages = _as_messages(parsed)
        if messages is not None:
            text = pick(messages)
            if text:
                return text
        elif parsed is not None:
            notes.setdefault(
                field_name, f"{messages_key} on span {span.span_id} is not a message list"
            )
    # 2. OpenLLMetry indexed attributes
    indexed = _indexed_messages(span, legacy_key)
    if indexed:
        text = pick(indexed)
        if text:
            return text
    # 3. plain gen_ai.prompt / gen_ai.completion: messages JSON or plain text
    raw = _raw(span, legacy_key, notes, field_name)
    if isinstance(raw, str) and raw.strip():
        parsed = _maybe_json(raw)
        if isinstance(parsed, (list, Mapping)):
            text = pick(_as_messages(parsed) or [])
            if text:
                return text
        elif isinstance(parsed, str):
            return parsed
    # 4. span events
    names = _INPUT_EVENTS if want_input else _OUTPUT_EVENTS
    texts = [
        t
        for t in (_event_text(e, notes, span, field_name) for e in span.events if e.name in names)
        if t
    ]
    if texts:
        return texts[-1] if want_input else "\n".join(texts)
    # 5. captured arguments / return value
    raw = _raw(span, captured_key, notes, field_name)
    if raw is not None:
        parsed = _json(raw, captured_key, span, notes, field_name)
        text = _captured_text(parsed, _INPUT_KEYS if want_input else _OUTPUT_KEYS, want_input)
        if text:
            return text
    notes.setdefault(
        field_name,
        f"span {span.span_id} ({span.name!r}) has no {'input' if want_input else 'output'} text "
        f"({messages_key}, {legacy_key}, message events or {captured_key})",
    )
    return None


def _extract_input(span: SpanRecord, notes: dict[str, str]) -> str | None:
    return _extract(span, notes, want_input=True)


def _extract_output(span: SpanRecord, notes: dict[str, str]) -> str | None:
    return _extract(span, notes, want_input=False)


def _first_text(
    spans: Iterable[SpanRecord], extract: Any, notes: dict[str, str], field_name: str
) -> str | None:
    first_note: dict[str, str] = {}
    for span in spans:
        local: dict[str, str] = {}
        text = extract(span, local)
        if text:
            return str(text)
        if not first_note and field_name in local:
            first_note[field_name] = local[field_name]  # the primary span's reason explains best
    notes.update({k: v for k, v in first_note.items() if k not in notes})
    return None


# ====================================================================== context and tools
def _document_texts(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        return [value] if isinstance(value, str) and value.strip() else []
    texts = []
    for item in value:
        if isinstance(item, str):
            if item.strip():
                texts.append(item)
        elif isinstance(item, Mapping):
            for key in _DOC_TEXT_KEYS:
                text = item.get(key)
                if isinstance(text, str) and text.strip():
                    texts.append(text)
                    break
    return texts


def _retrieval_context(
    scope: list[SpanRecord], notes: dict[str, str], where: str, truncated: list[str]
) -> list[str] | None:
    retrievers = [s for s in scope if span_kind(s) == "retriever"]
    if not retrievers:
        notes.setdefault("retrieval_context", f"no retriever spans in {where}")
        return None
    texts: list[str] = []
    for span in retrievers:
        local: dict[str, str] = {}
        docs: list[str] = []
        for key in (attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT, attrs.GEN_AI_RETRIEVAL_DOCUMENTS):
            raw = _raw(span, key, local, "retrieval_context")
            if raw is None:
                continue
            docs = _document_texts(_json(raw, key, span, local, "retrieval_context"))
            if docs:
                break
        if not docs and local:
            notes.setdefault("retrieval_context", local["retrieval_context"])
        texts.extend(docs)
    if not texts:
        notes.setdefault(
            "retrieval_context",
            f"{len(retrievers)} retriever span(s) in {where} carry no document text "
            f"({attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT})",
        )
        return None
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


def _tool_value(raw: Any) -> Any:
    if isinstance(raw, str):
        return _maybe_json(raw)
    return raw


def _tool_output(value: Any) -> Any:
    """Tool results are free-form; keep them bounded without dropping the call."""
    if isinstance(value, str):
        return value if len(value) <= MAX_FIELD_CHARS else _cap(value, "tool", [])
    try:
        size = len(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return str(value)[:MAX_FIELD_CHARS]
    if size > MAX_FIELD_CHARS:
        return _cap(json.dumps(value, default=str), "tool", [])
    return value


def _tools_called(
    scope: list[SpanRecord], notes: dict[str, str], where: str
) -> list[ToolCall] | None:
    calls: list[ToolCall] = []
    prefix = attrs.OPERATION_BY_KIND["tool"] + " "
    for span in scope:
        if span_kind(span) != "tool":
            continue
        if len(calls) >= MAX_TOOL_CALLS:
            notes.setdefault(
                "tools_called", f"more than {MAX_TOOL_CALLS} tool calls in {where}; kept the first"
            )
            break
        a = span.attributes
        name = a.get(attrs.GEN_AI_TOOL_NAME)
        if not isinstance(name, str) or not name.strip():
            name = span.name[len(prefix) :] if span.name.startswith(prefix) else span.name
        if not name.strip():
            continue
        local: dict[str, str] = {}
        args_raw = _raw(span, attrs.GEN_AI_TOOL_CALL_ARGUMENTS, local, "tools_called")
        if args_raw is None:
            args_raw = _raw(span, attrs.SPANJUDGE_INPUT, local, "tools_called")
        result_raw = _raw(span, attrs.GEN_AI_TOOL_CALL_RESULT, local, "tools_called")
        if result_raw is None:
            result_raw = _raw(span, attrs.SPANJUDGE_OUTPUT, local, "tools_called")
        args = _tool_value(args_raw)
        params: dict[str, Any] | None
        if args is None:
            params = None
        elif isinstance(args, Mapping):
            params = {str(k): v for k, v in args.items()}
        else:
            params = {"value": args}
        if params is not None and len(json.dumps(params, default=str)) > MAX_FIELD_CHARS:
            params = {"value": _cap(json.dumps(params, default=str), "tool", [])}
        description = a.get(attrs.GEN_AI_TOOL_DESCRIPTION)
        calls.append(
            ToolCall(
                name=name,
                input_parameters=params,
                output=_tool_output(_tool_value(result_raw)),
                description=description if isinstance(description, str) else None,
            )
        )
    if not calls:
        notes.setdefault("tools_called", f"no tool spans in {where}")
        return None
    return calls
