"""The OpenTelemetry GenAI semantic conventions, current and older, on spans and in events.

Current: ``gen_ai.operation.name`` decides the kind; ``gen_ai.input.messages`` /
``gen_ai.output.messages`` (JSON strings or structured lists), ``gen_ai.system_instructions``,
``gen_ai.conversation.id``, ``gen_ai.retrieval.documents`` (id and score; a ``content``/``text``
key is read when a producer adds one), ``gen_ai.tool.*``; the
``gen_ai.client.inference.operation.details`` event (a log record joined to its span, or a span
event) carrying the same message attributes.

Older (read when the current ones are absent): ``gen_ai.prompt`` / ``gen_ai.completion``, plain
or indexed (``gen_ai.prompt.0.role``/``.content``, OpenLLMetry's long-time shape, also LiteLLM's),
the per-message events (``gen_ai.user.message``, ``gen_ai.choice``...), ``gen_ai.content.prompt``
/ ``gen_ai.content.completion`` events, ``gen_ai.system`` as provider.

This reader also fills the gaps other dialects leave, since most instrumentations write some
semconv attributes beside their own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import tool_calls
from spanjudge.evaluators._rebuild.dialects.message_text import (
    MAX_RAW_CHARS,
    as_messages,
    assistant_text,
    document_texts,
    indexed,
    last_user_text,
    maybe_json,
    message_text,
    nonempty,
    system_text,
)
from spanjudge.evaluators._rebuild.dialects.view import (
    Document,
    GenAIView,
    ToolCallView,
    ViewKind,
)
from spanjudge.tracer import _attributes as attrs

NAME = "genai-semconv"

OPERATION_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_INPUT_EVENTS = frozenset(
    {
        attrs.GEN_AI_USER_MESSAGE_EVENT,
        attrs.GEN_AI_CONTENT_PROMPT_EVENT,
    }
)
_SYSTEM_EVENTS = frozenset({attrs.GEN_AI_SYSTEM_MESSAGE_EVENT})
_OUTPUT_EVENTS = frozenset(
    {
        attrs.GEN_AI_CHOICE_EVENT,
        attrs.GEN_AI_ASSISTANT_MESSAGE_EVENT,
        attrs.GEN_AI_CONTENT_COMPLETION_EVENT,
    }
)
_INDEXED = {
    prefix: re.compile(rf"^{re.escape(prefix)}\.(\d+)\.(role|content)$")
    for prefix in (attrs.GEN_AI_PROMPT, attrs.GEN_AI_COMPLETION)
}
# Operation names other libraries use for the same kinds.
_KIND_BY_OPERATION: dict[str, ViewKind] = {
    **{op: "llm" for op in attrs.LLM_OPERATIONS},
    "invoke_agent": "agent",
    "create_agent": "chain",
    "retrieval": "retriever",
    "retrieve": "retriever",
    "vector_db_retrieve": "retriever",
    "search_memory": "retriever",  # memory records returned: the agent's retrieval
    "execute_tool": "tool",
    "invoke_workflow": "chain",
    "plan": "chain",
    "embeddings": "chain",
    **{
        op: "chain"
        for op in (
            "create_memory",
            "update_memory",
            "upsert_memory",
            "delete_memory",
            "create_memory_store",
            "delete_memory_store",
        )
    },
}
MEMORY_RECORDS = "gen_ai.memory.records"
GEN_AI_AGENT_ID = "gen_ai.agent.id"


def matches(span: SpanRecord) -> bool:
    return isinstance(span.attributes.get(attrs.GEN_AI_OPERATION_NAME), str)


def kind_of(span: SpanRecord) -> ViewKind | None:
    operation = span.attributes.get(attrs.GEN_AI_OPERATION_NAME)
    return _KIND_BY_OPERATION.get(operation) if isinstance(operation, str) else None


def raw(view: GenAIView, key: str, field_name: str, source: Mapping[str, Any] | None = None) -> Any:
    """An attribute value (from ``source``, default the span), or None with a note when it is
    over the parse limit."""
    value = (view.span.attributes if source is None else source).get(key)
    if isinstance(value, str) and len(value) > MAX_RAW_CHARS:
        view.note(
            field_name,
            f"{key} on span {view.span.span_id} is {len(value)} chars, "
            f"over the {MAX_RAW_CHARS}-char parse limit",
        )
        return None
    return value


def messages(view: GenAIView, key: str, field_name: str, source: Any = None) -> list[Any] | None:
    """A message list from a JSON string, a structured list, or a plain-text prompt; None with
    a note when the value is JSON that does not parse (e.g. cut by a size limit)."""
    value = raw(view, key, field_name, source)
    if value is None:
        return None
    if not isinstance(value, str):
        return as_messages(value)
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        if value.lstrip()[:1] not in ("[", "{"):
            return [value] if value.strip() else None  # a plain-text prompt
        hint = " (cut by the tracer's size limit)" if key in truncated_keys(view.span) else ""
        view.note(field_name, f"{key} on span {view.span.span_id} is not valid JSON{hint}")
        return None
    if isinstance(parsed, str):
        return [parsed] if parsed.strip() else None
    found = as_messages(parsed)
    if found is None:
        view.note(field_name, f"{key} on span {view.span.span_id} is not a message list")
    return found


def truncated_keys(span: SpanRecord) -> set[str]:
    """Attribute keys the tracer cut to its size limit (``spanjudge.truncated``)."""
    value = span.attributes.get(attrs.SPANJUDGE_TRUNCATED)
    if isinstance(value, list | tuple):
        return {str(v) for v in value}
    return {value} if isinstance(value, str) else set()


def read(view: GenAIView) -> None:
    """Fill what is still empty in ``view`` from the semconv attributes and events."""
    span = view.span
    a = span.attributes
    if view.kind is None:
        view.kind = kind_of(span)
    _fill_ids(view, a)
    for source in (a, *_details(span)):
        before = (view.input_text, view.output_text, view.system_text)
        _read_messages(view, source)
        if source is not a:
            _sourced(view, before, f"event {OPERATION_DETAILS_EVENT}")
        else:  # name the attribute: a refused field says where it came from
            for name, key, was, now in zip(
                ("input", "actual_output"),
                (attrs.GEN_AI_INPUT_MESSAGES, attrs.GEN_AI_OUTPUT_MESSAGES),
                before[:2],
                (view.input_text, view.output_text),
                strict=True,
            ):
                if was is None and now is not None and view.dialect == NAME:
                    view.source(name, f"attribute {key}")
    _read_legacy(view)
    _read_events(view)
    if view.kind == "retriever" and view.documents is None:
        _read_documents(view)
    if view.kind == "tool" and view.tool is None:
        _read_tool(view)


def _fill_ids(view: GenAIView, a: Mapping[str, Any]) -> None:
    if view.conversation_id is None:
        view.conversation_id = _str(a.get(attrs.GEN_AI_CONVERSATION_ID))
    if view.agent_name is None:
        view.agent_name = _str(a.get(attrs.GEN_AI_AGENT_NAME)) or _str(a.get(GEN_AI_AGENT_ID))
    if view.model is None:
        view.model = _str(a.get(attrs.GEN_AI_REQUEST_MODEL)) or _str(
            a.get(attrs.GEN_AI_RESPONSE_MODEL)
        )
    if view.response_id is None:
        view.response_id = _str(a.get(attrs.GEN_AI_RESPONSE_ID))
    if view.input_tokens is None:
        view.input_tokens = _count(a, _INPUT_TOKENS)
    if view.output_tokens is None:
        view.output_tokens = _count(a, _OUTPUT_TOKENS)


def _sourced(view: GenAIView, before: tuple[Any, ...], how: str) -> None:
    """Record ``how`` for the text fields the last read filled."""
    after = (view.input_text, view.output_text, view.system_text)
    for name, was, now in zip(("input", "actual_output", "system"), before, after, strict=True):
        if was is None and now is not None:
            view.source(name, how)


def _details(span: SpanRecord) -> list[Mapping[str, Any]]:
    """Attributes of the operation-details events joined to the span (log records or events)."""
    return [e.attributes for e in span.events if e.name == OPERATION_DETAILS_EVENT]


def _read_messages(view: GenAIView, source: Mapping[str, Any]) -> None:
    if view.input_text is None or view.system_text is None:
        found = messages(view, attrs.GEN_AI_INPUT_MESSAGES, "input", source)
        if found:
            view.input_text = view.input_text or last_user_text(found)
            view.system_text = view.system_text or system_text(found)
            if view.input_text is None:
                view.note(
                    "input",
                    f"{attrs.GEN_AI_INPUT_MESSAGES} on span {view.span.span_id} holds no text",
                )
    if view.output_text is None:
        found = messages(view, attrs.GEN_AI_OUTPUT_MESSAGES, "actual_output", source)
        if found:
            view.output_text = assistant_text(found) or tool_calls.final_answer_of(found)
            if view.output_text is None and tool_calls.only_tool_calls(found):
                view.note(
                    "actual_output",
                    f"span {view.span.span_id} ({view.span.name!r}): the model answered with "
                    "tool calls only, no text",
                )
            elif view.output_text is None:
                view.note(
                    "actual_output",
                    f"{attrs.GEN_AI_OUTPUT_MESSAGES} on span {view.span.span_id} holds no text",
                )
    if view.system_text is None:
        found = messages(view, attrs.GEN_AI_SYSTEM_INSTRUCTIONS, "system", source)
        if found:
            texts = [t for t in (message_text(p) for p in found) if t]
            view.system_text = "\n".join(texts) or None


def _read_legacy(view: GenAIView) -> None:
    a = view.span.attributes
    for prefix, want_input in ((attrs.GEN_AI_PROMPT, True), (attrs.GEN_AI_COMPLETION, False)):
        if (view.input_text if want_input else view.output_text) is not None:
            continue
        items = indexed(a, _INDEXED[prefix])
        if not items:
            plain = raw(view, prefix, "input" if want_input else "actual_output")
            found: list[Any] | None
            if isinstance(plain, str) and plain.lstrip()[:1] not in ("[", "{"):
                found = [plain] if plain.strip() else None
            else:
                found = as_messages(plain)
            if not found:
                continue
            items = found
        if not items:
            continue
        if want_input:
            view.input_text = last_user_text(items)
            view.system_text = view.system_text or system_text(items)
        else:
            view.output_text = assistant_text(items)


def _event_text(attributes: Mapping[str, Any], want_input: bool) -> str | None:
    for key in ("content", attrs.GEN_AI_PROMPT, attrs.GEN_AI_COMPLETION):
        value = attributes.get(key)
        if isinstance(value, str) and value.strip():
            found = as_messages(value)
            if found and not (len(found) == 1 and isinstance(found[0], str)):
                picked = last_user_text(found) if want_input else assistant_text(found)
                if picked or maybe_json(value) is not value:
                    return picked  # a structure without text is not text
            return value
    for key in ("message", "gen_ai.event.content", "body"):
        value = maybe_json(attributes.get(key))
        if isinstance(value, Mapping | str | list):  # a list: bare content blocks
            picked = nonempty(message_text(value))
            if picked:
                return picked
    return None


def _read_events(view: GenAIView) -> None:
    inputs: list[tuple[str, str | None]] = []
    outputs: list[tuple[str, str | None]] = []
    systems: list[tuple[str, str | None]] = []
    for event in view.span.events:
        if event.name in _INPUT_EVENTS:
            inputs.append((event.name, _event_text(event.attributes, True)))
        elif event.name in _OUTPUT_EVENTS:
            outputs.append((event.name, _event_text(event.attributes, False)))
        elif event.name in _SYSTEM_EVENTS:
            systems.append((event.name, _event_text(event.attributes, True)))
    if view.input_text is None:
        hit = next(((n, t) for n, t in reversed(inputs) if t), None)
        if hit is not None:
            view.input_text = hit[1]
            view.source("input", f"event {hit[0]}")
    if view.output_text is None:
        # gen_ai.assistant.message events before a choice are the prompt's history
        choices = [(n, t) for n, t in outputs if n != attrs.GEN_AI_ASSISTANT_MESSAGE_EVENT]
        outputs = choices or outputs
        texts = [(n, t) for n, t in outputs if t]
        if texts:
            view.output_text = "\n".join(t for _, t in texts)
            view.source("actual_output", f"event {texts[0][0]}")
        elif outputs and "actual_output" not in view.notes:
            calls = [e for e in view.span.events if e.name == outputs[-1][0]]
            only_calls = any(
                tool_calls.tool_call_parts(_unwrapped_body(e.attributes.get(k)))
                for e in calls
                for k in ("message", "content", "body")
            )
            view.note(
                "actual_output",
                f"span {view.span.span_id} ({view.span.name!r}): the model answered with tool "
                "calls only, no text"
                if only_calls
                else f"event {outputs[0][0]} on span {view.span.span_id} could not be read as text",
            )
    if view.system_text is None:
        texts = [(n, t) for n, t in systems if t]
        if texts:
            view.system_text = "\n".join(t for _, t in texts)
            view.source("system", f"event {texts[0][0]}")


def _unwrapped_body(value: Any) -> Any:
    """A content log record's body as the message it carries (``{"message": {...}}``)."""
    parsed = maybe_json(value)
    if isinstance(parsed, Mapping) and isinstance(parsed.get("message"), Mapping | str):
        return parsed["message"]
    return parsed


def _read_documents(view: GenAIView) -> None:
    for key in (attrs.GEN_AI_RETRIEVAL_DOCUMENTS, MEMORY_RECORDS):
        parsed = maybe_json(raw(view, key, "retrieval_context"))
        if isinstance(parsed, list):
            view.documents = [_document(item) for item in parsed]
            return


def _document(item: Any) -> Document:
    if isinstance(item, Mapping):
        texts = document_texts([item])
        score = item.get("score")
        ident = item.get("id")
        return Document(
            texts[0] if texts else None,
            str(ident) if ident is not None else None,
            float(score)
            if isinstance(score, int | float) and not isinstance(score, bool)
            else None,
        )
    return Document(item if isinstance(item, str) else None)


def _read_tool(view: GenAIView) -> None:
    a = view.span.attributes
    name = _str(a.get(attrs.GEN_AI_TOOL_NAME))
    prefix = "execute_tool "
    if name is None:
        # no tool-name attribute: the span's name is the tool's (a callable's name is made the
        # tool's by the general rules)
        name = view.span.name.removeprefix(prefix).strip() or None
    if not name:
        return
    arguments = raw(view, attrs.GEN_AI_TOOL_CALL_ARGUMENTS, "tools_called")
    result = raw(view, attrs.GEN_AI_TOOL_CALL_RESULT, "tools_called")
    # older event form (Strands): the arguments in a gen_ai.tool.message event, the result in
    # the tool span's gen_ai.choice event
    for event in view.span.events:
        if arguments is None and event.name == attrs.GEN_AI_TOOL_MESSAGE_EVENT:
            arguments = event.attributes.get("content")
        elif result is None and event.name == attrs.GEN_AI_CHOICE_EVENT:
            result = event.attributes.get("message", event.attributes.get("content"))
    view.tool = ToolCallView(
        name=name,
        arguments=maybe_json(arguments),
        result=maybe_json(result),
        call_id=_str(a.get(attrs.GEN_AI_TOOL_CALL_ID)),
        description=_str(a.get(attrs.GEN_AI_TOOL_DESCRIPTION)),
    )


# current names first, then the older ones still written (and OpenInference's)
_INPUT_TOKENS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
)
_OUTPUT_TOKENS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)


def _count(a: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = a.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _str(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None
