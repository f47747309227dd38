"""Tool calls in what a span records, in every shape the readers know: the calls a model
requested and the tools it was offered.

Requested calls (:func:`requested_tool_calls`), read from the model's output messages in every
message form :mod:`.message_text` reads text from: semconv parts of type ``tool_call``
(attribute ``gen_ai.output.messages``, an ``operation.details`` event, a ``gen_ai.choice``
event's ``message`` attribute or its log record body ``{"message": {"tool_calls": [...]}}``),
OpenAI ``tool_calls`` (and the legacy ``function_call``), Anthropic ``tool_use`` blocks,
Bedrock/Strands ``toolUse`` blocks, Gemini ``functionCall``; OpenInference's flattened
``llm.output_messages.N.message.tool_calls.M.tool_call.function.*``; OpenLLMetry's
``gen_ai.completion.N.tool_calls.M.*``; the Vercel AI SDK's ``ai.response.toolCalls``. The
final-answer tool some agent frameworks answer through (smolagents' ``final_answer``,
pydantic-ai's ``final_result``) carries the answer rather than a step (:func:`final_answer`).

Tools offered (:func:`tools_available`): ``gen_ai.tool.definitions``, OpenInference
``llm.tools.N.tool.json_schema``, OpenLLMetry ``llm.request.functions.N.*``, Strands
``gen_ai.agent.tools`` (names only).

Example::

    only_tool_calls([{"role": "assistant", "parts": [{"type": "tool_call", "name": "f"}]}])  # True
    final_answer("final_answer", '{"answer": "Yes."}')  # 'Yes.'
    [(c.name, c.arguments) for c in requested_tool_calls(chat_span)]
    # [("retrieve_docs", {"query": "How long do I have to return a blender?"})]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects.message_text import (
    OUTPUT_KEYS,
    captured_text,
    maybe_json,
    message_text,
)
from spanjudge.tracer import _attributes as attrs

# raw keys read here (the view does not carry these parts of a span)
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
AGENT_TOOLS = "gen_ai.agent.tools"
VERCEL_TOOL_CALLS = "ai.response.toolCalls"
CHOICE_EVENT = "gen_ai.choice"
_OI_OUTPUT_CALL = re.compile(
    r"^llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.(?:function\.)?(\w+)$"
)
_OI_TOOL = re.compile(r"^llm\.tools\.(\d+)\.tool\.json_schema$")
_TRACELOOP_CALL = re.compile(r"^gen_ai\.completion\.(\d+)\.tool_calls\.(\d+)\.(\w+)$")
_TRACELOOP_FUNCTION = re.compile(r"^llm\.request\.functions\.(\d+)\.(\w+)$")

FINAL_ANSWER_TOOL = re.compile(r"(?i)^final[_ -]?(answer|result|output|response)$")


def final_answer(name: Any, arguments: Any) -> str | None:
    """The answer a call to a final-answer tool carries (``final_answer(answer="...")``), or
    ``None`` when ``name`` is another tool or the arguments hold no text."""
    if not isinstance(name, str) or not FINAL_ANSWER_TOOL.match(name.strip()):
        return None
    return captured_text(maybe_json(arguments), ("answer", *OUTPUT_KEYS), want_input=False)


TOOL_CALL_PART_KEYS = frozenset(
    {"toolUse", "tool_use", "functionCall", "function_call", "function"}
)
TOOL_CALL_PART_TYPES = frozenset({"tool_call", "tool_use", "function_call", "server_tool_call"})


def tool_call_parts(message: Any) -> list[Mapping[str, Any]] | None:
    """The tool calls a message (or bare block list) holds, when it holds nothing else but
    tool calls (OpenAI ``tool_calls``, semconv ``tool_call`` parts, Anthropic ``tool_use``,
    Bedrock/Strands ``toolUse``, Gemini ``functionCall``); ``None`` when it holds text or
    nothing."""
    message = maybe_json(message)
    if isinstance(message, Mapping):
        if message_text(message):
            return None
        parts = message.get("tool_calls") or message.get("parts") or message.get("content")
    else:
        parts = message
    if not isinstance(parts, list) or not parts:
        return None
    calls = []
    for part in parts:
        if not isinstance(part, Mapping):
            return None
        inner = next(
            (part[k] for k in TOOL_CALL_PART_KEYS if isinstance(part.get(k), Mapping)), None
        )
        if inner is not None:
            calls.append(inner)
        elif part.get("type") in TOOL_CALL_PART_TYPES:
            calls.append(part)
        else:
            return None
    return calls


def final_answer_of(messages: list[Any]) -> str | None:
    """The answer carried by a final-answer tool call among ``messages``' tool calls."""
    for message in messages:
        for call in tool_call_parts(message) or ():
            arguments = call.get("arguments", call.get("input", call.get("args")))
            answer = final_answer(call.get("name"), arguments)
            if answer:
                return answer
    return None


def only_tool_calls(messages: list[Any]) -> bool:
    """True when every message holds tool calls and nothing else (a tool round trip)."""
    return bool(messages) and all(tool_call_parts(m) for m in messages)


@dataclass(slots=True)
class ToolRequest:
    """A tool call a model requested: name, arguments (parsed when JSON), the call id."""

    name: str
    arguments: Any = None
    call_id: str | None = None


@dataclass(slots=True)
class ToolAnswer:
    """What a tool message in a model call's input says a tool returned: the call it answers
    (id, else ``None``), the tool's name when the message says it, the content, the error."""

    call_id: str | None
    name: str | None
    content: Any
    error: str | None = None


@dataclass(slots=True)
class ToolDefinition:
    """A tool the model was offered: its name, description and parameter schema."""

    name: str
    description: str | None = None
    parameters: Any = None


# ====================================================================== tools named after callables
CALLABLE_RULE = "tool named after its callable"
_CALLABLE = re.compile(
    r"^(?:(?:tool|function|fn)\s*[:/]\s*(?P<prefixed>[A-Za-z_][\w-]*)"
    r"|(?P<called>[A-Za-z_]\w*)\.__(?:call|invoke|run)__"
    r"|(?:[\w]+\.)*[A-Z]\w*\.(?P<method>[a-z_]\w*))$"
)


def callable_tool_name(name: str) -> str:
    """The tool a span named after its callable stands for: ``refund.__call__``,
    ``Tools.refund``, ``billing.Tools.refund``, ``tool:refund`` -> ``refund``; any other name
    as given."""
    stripped = name.strip()
    if not stripped or ("." not in stripped and ":" not in stripped and "/" not in stripped):
        return name
    match = _CALLABLE.match(stripped)
    if match is None:
        return name
    return next(g for g in match.groups() if g)


# ====================================================================== requested tool calls
def requested_tool_calls(span: SpanRecord) -> list[ToolRequest]:
    """The tool calls a model-call span's output requested, in order (first source wins)."""
    for found in (_flattened_calls(span), _message_calls(span), _vercel_calls(span)):
        if found:
            return found
    return []


def _message_calls(span: SpanRecord) -> list[ToolRequest]:
    values: list[Any] = [span.attributes.get(attrs.GEN_AI_OUTPUT_MESSAGES)]
    for event in span.events:
        a = event.attributes
        values.append(a.get(attrs.GEN_AI_OUTPUT_MESSAGES))
        if event.name == CHOICE_EVENT:
            # the message attribute, or the log record's body ({"message": {...}}): every form
            # the text reader knows
            values.extend((a.get("message"), a.get("content"), a.get("body")))
    for value in values:
        if value is None:
            continue
        calls = [_request(part) for part in _call_parts(maybe_json(value), 0)]
        found = [c for c in calls if c is not None]
        if found:
            return found
    return []


def _call_parts(value: Any, depth: int) -> Iterator[Mapping[str, Any]]:
    """Every tool-call block inside a message, a list of messages or a list of blocks."""
    if depth > 5:
        return
    if isinstance(value, list):
        for item in value:
            yield from _call_parts(item, depth + 1)
        return
    if not isinstance(value, Mapping):
        return
    inner = next(
        (value[k] for k in TOOL_CALL_PART_KEYS if isinstance(value.get(k), Mapping)),
        None,
    )
    if inner is not None and "role" not in value:
        merged = dict(inner)
        merged.setdefault("id", value.get("id"))
        yield merged
        return
    legacy = value.get("function_call")  # an OpenAI message before tool_calls
    if isinstance(legacy, Mapping) and not value.get("tool_calls"):
        yield legacy
    if value.get("type") in TOOL_CALL_PART_TYPES:
        yield value
        return
    for key in ("message", "tool_calls", "parts", "content"):
        nested = value.get(key)
        if isinstance(nested, list | Mapping):
            yield from _call_parts(nested, depth + 1)


def _request(part: Mapping[str, Any]) -> ToolRequest | None:
    name = part.get("name") or part.get("toolName")
    if not isinstance(name, str) or not name.strip():
        return None
    arguments = next((part[k] for k in ("arguments", "input", "args") if k in part), None)
    call_id = next(
        (part[k] for k in ("id", "toolUseId", "toolCallId", "call_id") if part.get(k)), None
    )
    return ToolRequest(name, maybe_json(arguments), str(call_id) if call_id else None)


def _flattened_calls(span: SpanRecord) -> list[ToolRequest]:
    calls: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in span.attributes.items():
        match = _OI_OUTPUT_CALL.match(key) or _TRACELOOP_CALL.match(key)
        if match:
            at = (int(match.group(1)), int(match.group(2)))
            calls.setdefault(at, {})[match.group(3)] = value
    found = [_request(calls[at]) for at in sorted(calls)]
    return [c for c in found if c is not None]


def _vercel_calls(span: SpanRecord) -> list[ToolRequest]:
    value = maybe_json(span.attributes.get(VERCEL_TOOL_CALLS))
    if not isinstance(value, list):
        return []
    found = [_request(p) for p in value if isinstance(p, Mapping)]
    return [c for c in found if c is not None]


# ====================================================================== tool messages
_OI_INPUT_MESSAGE = re.compile(
    r"^llm\.input_messages\.(\d+)\.message\.(role|content|tool_call_id|name)$"
)
_PROMPT_MESSAGE = re.compile(r"^gen_ai\.prompt\.(\d+)\.(role|content|tool_call_id|name)$")
TOOL_MESSAGE_EVENT = "gen_ai.tool.message"
VERCEL_PROMPT_MESSAGES = "ai.prompt.messages"
ERROR_STATUSES = frozenset({"error", "failed", "failure"})
_RESULT_BLOCK_TYPES = frozenset({"tool_result", "tool-result", "tool_call_response"})
_RESULT_BLOCK_KEYS = ("toolResult", "functionResponse", "function_response")


def tool_answers(span: SpanRecord) -> list[ToolAnswer]:
    """The tool results a model call's input messages carry (the tool messages that answer the
    calls an earlier model call requested), in order, from every message form read for text:
    OpenAI ``role: tool`` messages, semconv ``tool_call_response`` parts, Anthropic
    ``tool_result`` blocks, Bedrock ``toolResult``, Gemini ``functionResponse``, the Vercel AI
    SDK's ``tool-result`` parts, flattened OpenInference/OpenLLMetry messages and
    ``gen_ai.tool.message`` events."""
    a = span.attributes
    sources: list[Any] = [a.get(attrs.GEN_AI_INPUT_MESSAGES), a.get(VERCEL_PROMPT_MESSAGES)]
    sources.extend(e.attributes.get(attrs.GEN_AI_INPUT_MESSAGES) for e in span.events)
    for value in sources:
        parsed = maybe_json(value)
        if isinstance(parsed, Mapping):
            parsed = parsed.get("messages", [parsed])
        if isinstance(parsed, list):
            found = [answer for message in parsed for answer in _answers_in(message)]
            if found:
                return found
    for pattern in (_OI_INPUT_MESSAGE, _PROMPT_MESSAGE):
        by_index: dict[int, dict[str, Any]] = {}
        for key, value in a.items():
            match = pattern.match(key)
            if match:
                by_index.setdefault(int(match.group(1)), {})[match.group(2)] = value
        found = [x for i in sorted(by_index) for x in _answers_in(by_index[i])]
        if found:
            return found
    found = []
    for event in span.events:
        if event.name == TOOL_MESSAGE_EVENT:
            body = maybe_json(event.attributes.get("body"))
            fields = body if isinstance(body, Mapping) else event.attributes
            message = {"role": "tool", **{k: v for k, v in fields.items() if k != "role"}}
            message.setdefault("tool_call_id", fields.get("id"))
            found.extend(_answers_in(message))
    return found


def _answers_in(message: Any) -> list[ToolAnswer]:
    if not isinstance(message, Mapping):
        return []
    out: list[ToolAnswer] = []
    blocks = message.get("parts", message.get("content"))
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, Mapping):
            continue
        inner = next(
            (block[k] for k in _RESULT_BLOCK_KEYS if isinstance(block.get(k), Mapping)), None
        )
        if inner is not None:
            out.append(_answer(inner))
        elif block.get("type") in _RESULT_BLOCK_TYPES:
            out.append(_answer(block))
    if not out and message.get("role") == "tool":
        out.append(_answer(message, content_of_message=True))
    return out


def _answer(block: Mapping[str, Any], *, content_of_message: bool = False) -> ToolAnswer:
    call_id = next(
        (block[k] for k in ("tool_call_id", "tool_use_id", "toolUseId", "toolCallId", "id",
                            "call_id") if block.get(k)),
        None,
    )  # fmt: skip
    name = block.get("name", block.get("toolName"))
    content = next(
        (block[k] for k in ("content", "response", "result", "output") if k in block), None
    )
    if content_of_message and isinstance(content, list):
        content = message_text({"content": content}) or content
    return ToolAnswer(
        str(call_id) if call_id else None,
        name if isinstance(name, str) and name.strip() else None,
        maybe_json(content),
        _answer_error(block, maybe_json(content)),
    )


def _answer_error(block: Mapping[str, Any], content: Any) -> str | None:
    """The error a tool message or its content object says there was."""
    if block.get("is_error") is True or block.get("isError") is True:
        return _error_text(content) or "tool error"
    status = block.get("status")
    if isinstance(status, str) and status.lower() in ERROR_STATUSES:
        return _error_text(content) or f"tool status {status}"
    if isinstance(content, Mapping):
        error = content.get("error")
        if error not in (None, "", False):
            return error if isinstance(error, str) else json.dumps(error, default=str)[:300]
    return None


def _error_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content[:300] or None
    text = message_text({"content": content}) if isinstance(content, list) else None
    if text:
        return text[:300]
    if isinstance(content, Mapping) and isinstance(content.get("error"), str):
        return str(content["error"])[:300]
    return None


# ====================================================================== tools available
def tools_available(span: SpanRecord) -> list[ToolDefinition]:
    """The tools a model-call or agent span says were offered (empty when it lists none)."""
    a = span.attributes
    out: list[ToolDefinition] = []
    listed = maybe_json(a.get(TOOL_DEFINITIONS))
    if isinstance(listed, list):
        out.extend(d for d in map(_definition, listed) if d is not None)
    for key, value in a.items():
        if _OI_TOOL.match(key):
            found = _definition(maybe_json(value))
            if found is not None:
                out.append(found)
    functions: dict[int, dict[str, Any]] = {}
    for key, value in a.items():
        match = _TRACELOOP_FUNCTION.match(key)
        if match:
            functions.setdefault(int(match.group(1)), {})[match.group(2)] = value
    out.extend(d for d in (_definition(functions[i]) for i in sorted(functions)) if d)
    names = maybe_json(a.get(AGENT_TOOLS))
    if isinstance(names, list):
        out.extend(ToolDefinition(n) for n in names if isinstance(n, str) and n.strip())
    return out


def _definition(value: Any) -> ToolDefinition | None:
    if not isinstance(value, Mapping):
        return None
    inner = value.get("function")
    if isinstance(inner, Mapping):  # {"type": "function", "function": {...}}
        value = inner
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    description = value.get("description")
    parameters = value.get("parameters", value.get("input_schema"))
    return ToolDefinition(
        name,
        description if isinstance(description, str) else None,
        maybe_json(parameters),
    )
