"""The Vercel AI SDK's telemetry (``experimental_telemetry: { isEnabled: true }``): a call span
``ai.generateText`` / ``ai.streamText`` / ``ai.generateObject`` (``ai.operationId``, ``ai.prompt``
JSON with ``system`` and ``prompt`` or ``messages``, ``ai.response.text`` / ``ai.response.object``)
around one ``....doGenerate`` / ``....doStream`` span per model call (``ai.prompt.messages``,
``ai.response.text``, plus GenAI semconv request attributes) and ``ai.toolCall`` spans
(``ai.toolCall.name`` / ``.args`` / ``.result``). ``ai.telemetry.metadata.<key>`` carries what the
app passed (``sessionId``, ``userId``); ``ai.telemetry.functionId`` names the function.

The call span is the turn (``agent``); ``recordInputs`` / ``recordOutputs: false`` leave no
content, which ``capture_off`` names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import semconv
from spanjudge.evaluators._rebuild.dialects.message_text import (
    as_messages,
    last_user_text,
    maybe_json,
    system_text,
)
from spanjudge.evaluators._rebuild.dialects.view import GenAIView, ToolCallView, ViewKind

NAME = "vercel-ai"

OPERATION_ID = "ai.operationId"
METADATA = "ai.telemetry.metadata."
CAPTURE_SETTING = (
    "the AI SDK recorded no content (experimental_telemetry recordInputs/recordOutputs)"
)
_CALLS = ("ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject")
_MODEL_CALLS = tuple(f"{call}.{step}" for call in _CALLS for step in ("doGenerate", "doStream"))
_SESSION_KEYS = ("sessionId", "session_id", "conversationId", "threadId", "chatId")


def matches(span: SpanRecord) -> bool:
    return isinstance(span.attributes.get(OPERATION_ID), str)


def kind_of(span: SpanRecord) -> ViewKind:
    operation = str(span.attributes.get(OPERATION_ID))
    if operation in _MODEL_CALLS:
        return "llm"
    if operation in _CALLS:
        return "agent"
    if operation == "ai.toolCall":
        return "tool"
    return "chain"


def read(view: GenAIView) -> None:
    a = view.span.attributes
    view.kind = kind_of(view.span)
    for key in _SESSION_KEYS:
        view.conversation_id = view.conversation_id or _str(a.get(METADATA + key))
    view.user_id = _str(a.get(METADATA + "userId")) or _str(a.get(METADATA + "user_id"))
    view.agent_name = _str(a.get("ai.telemetry.functionId"))
    view.model = _str(a.get("ai.model.id"))
    view.response_id = _str(a.get("ai.response.id"))
    if view.kind == "tool":
        view.tool = ToolCallView(
            name=_str(a.get("ai.toolCall.name")) or view.span.name,
            arguments=maybe_json(a.get("ai.toolCall.args")),
            result=maybe_json(a.get("ai.toolCall.result")),
            call_id=_str(a.get("ai.toolCall.id")),
        )
    else:
        prompt = semconv.messages(view, "ai.prompt.messages", "input")
        call = maybe_json(semconv.raw(view, "ai.prompt", "input"))
        if isinstance(call, Mapping):
            prompt = prompt or as_messages(call.get("messages"))
            if prompt is None and isinstance(call.get("prompt"), str):
                prompt = [{"role": "user", "content": call["prompt"]}]
            view.system_text = _str(call.get("system"))
        if prompt:
            view.input_text = last_user_text(prompt)
            view.system_text = view.system_text or system_text(prompt)
        answer = semconv.raw(view, "ai.response.text", "actual_output")
        if answer is None:
            answer = semconv.raw(view, "ai.response.object", "actual_output")
        view.output_text = _str(answer)
        if view.input_text is None and view.output_text is None:
            view.capture_off = CAPTURE_SETTING
    semconv.read(view)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
