"""The parts of an agent's trajectory a :class:`~.dialects.GenAIView` does not carry: the tool
calls a model call requested, the tools it was offered, a span's error, and hand-offs.

Read from the raw span, in every shape the interop recordings show:

* requested tool calls, from the model's output messages: semconv parts of type ``tool_call``
  (attribute ``gen_ai.output.messages`` or an ``operation.details`` / ``gen_ai.choice`` event),
  OpenAI ``tool_calls``, Anthropic ``tool_use`` blocks, Bedrock/Strands ``toolUse`` blocks,
  Gemini ``functionCall``; OpenInference's flattened
  ``llm.output_messages.N.message.tool_calls.M.tool_call.function.*``; OpenLLMetry's
  ``gen_ai.completion.N.tool_calls.M.*``; the Vercel AI SDK's ``ai.response.toolCalls``;
* tools available: ``gen_ai.tool.definitions``, OpenInference ``llm.tools.N.tool.json_schema``,
  OpenLLMetry ``llm.request.functions.N.*``, Strands ``gen_ai.agent.tools`` (names only);
* errors: status ``ERROR`` (with its message), ``error.type``, ``exception`` events (unless the
  span's status says ``OK``: the exception was handled), a tool status of ``error``;
* hand-offs: a span named ``handoff`` (the OpenAI Agents SDK), a ``transfer_to_<agent>`` tool.

Example::

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
from spanjudge.evaluators._rebuild.dialects import message_text as text
from spanjudge.evaluators._rebuild.dialects import tool_calls
from spanjudge.tracer import _attributes as attrs

# raw keys this module reads (the dialects do not expose these parts of a span)
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
AGENT_TOOLS = "gen_ai.agent.tools"
TOOL_STATUS = "gen_ai.tool.status"
VERCEL_TOOL_CALLS = "ai.response.toolCalls"
CHOICE_EVENT = "gen_ai.choice"
EXCEPTION_EVENT = "exception"
_OI_OUTPUT_CALL = re.compile(
    r"^llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.(?:function\.)?(\w+)$"
)
_OI_TOOL = re.compile(r"^llm\.tools\.(\d+)\.tool\.json_schema$")
_TRACELOOP_CALL = re.compile(r"^gen_ai\.completion\.(\d+)\.tool_calls\.(\d+)\.(\w+)$")
_TRACELOOP_FUNCTION = re.compile(r"^llm\.request\.functions\.(\d+)\.(\w+)$")
_HANDOFF_SPAN = re.compile(
    r"(?i)^handoff\b(?:.*?\bfrom\s+(?P<src>\S+))?(?:.*?\bto\s+(?P<dst>\S+))?"
)
_TRANSFER_TOOL = re.compile(r"(?i)^transfer_to_(?P<dst>\w+)$")
_ERROR_STATUSES = frozenset({"error", "failed", "failure"})
MAX_TOOLS_AVAILABLE = 200
"""Tool definitions kept per trajectory (the first ones, by name)."""
MAX_STEP_CHARS = 4_000
"""Longest argument or result of one step (JSON values are cut as their JSON text)."""


@dataclass(slots=True)
class ToolRequest:
    """A tool call a model requested: name, arguments (parsed when JSON), the call id."""

    name: str
    arguments: Any = None
    call_id: str | None = None


@dataclass(slots=True)
class ToolDefinition:
    """A tool the model was offered: its name, description and parameter schema."""

    name: str
    description: str | None = None
    parameters: Any = None


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
            values.append(a.get("message"))
    for value in values:
        if value is None:
            continue
        calls = [_request(part) for part in _call_parts(text.maybe_json(value), 0)]
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
        (value[k] for k in tool_calls.TOOL_CALL_PART_KEYS if isinstance(value.get(k), Mapping)),
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
    if value.get("type") in tool_calls.TOOL_CALL_PART_TYPES:
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
    return ToolRequest(name, text.maybe_json(arguments), str(call_id) if call_id else None)


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
    value = text.maybe_json(span.attributes.get(VERCEL_TOOL_CALLS))
    if not isinstance(value, list):
        return []
    found = [_request(p) for p in value if isinstance(p, Mapping)]
    return [c for c in found if c is not None]


# ====================================================================== tools available
def tools_available(span: SpanRecord) -> list[ToolDefinition]:
    """The tools a model-call or agent span says were offered (empty when it lists none)."""
    a = span.attributes
    out: list[ToolDefinition] = []
    listed = text.maybe_json(a.get(TOOL_DEFINITIONS))
    if isinstance(listed, list):
        out.extend(d for d in map(_definition, listed) if d is not None)
    for key, value in a.items():
        if _OI_TOOL.match(key):
            found = _definition(text.maybe_json(value))
            if found is not None:
                out.append(found)
    functions: dict[int, dict[str, Any]] = {}
    for key, value in a.items():
        match = _TRACELOOP_FUNCTION.match(key)
        if match:
            functions.setdefault(int(match.group(1)), {})[match.group(2)] = value
    out.extend(d for d in (_definition(functions[i]) for i in sorted(functions)) if d)
    names = text.maybe_json(a.get(AGENT_TOOLS))
    if isinstance(names, list):
        out.extend(ToolDefinition(n) for n in names if isinstance(n, str) and n.strip())
    return out


def offer_tools(span: SpanRecord, tools: dict[str, ToolDefinition]) -> None:
    """Add the tools ``span`` lists to ``tools`` (by name, at most
    :data:`MAX_TOOLS_AVAILABLE`)."""
    for tool in tools_available(span):
        known = tools.get(tool.name)
        if known is None and len(tools) < MAX_TOOLS_AVAILABLE:
            tools[tool.name] = tool
        elif known is not None and known.description is None and tool.description:
            tools[tool.name] = tool  # a fuller definition of a tool only named before


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
        text.maybe_json(parameters),
    )


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
    if isinstance(status, str) and status.lower() in _ERROR_STATUSES:
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
