"""pydantic-ai's own instrumentation (and Logfire, which records it): GenAI semconv spans
(``invoke_agent``, ``chat``, ``execute_tool``) plus the agent run's ``pydantic_ai.all_messages``
(the whole conversation in semconv message parts), ``final_result``, ``gen_ai.system_instructions``
and a ``metadata`` JSON object (``user_id`` etc.). Older releases name the agent run
``agent run`` with ``agent_name`` and ``all_messages_events``.

``InstrumentationSettings(include_content=False)`` keeps the message structure but drops the text
parts' content; ``capture_off`` names that setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import semconv
from spanjudge.evaluators._rebuild.dialects.message_text import (
    ASSISTANT_ROLES,
    OUTPUT_KEYS,
    assistant_text,
    captured_text,
    last_user_text,
    maybe_json,
    role,
)
from spanjudge.evaluators._rebuild.dialects.view import GenAIView, ViewKind
from spanjudge.tracer import _attributes as attrs

NAME = "pydantic-ai"

ALL_MESSAGES = "pydantic_ai.all_messages"
ALL_MESSAGES_EVENTS = "all_messages_events"  # releases before the semconv message format
FINAL_RESULT = "final_result"
CAPTURE_SETTING = (
    "pydantic-ai recorded no message content (InstrumentationSettings(include_content=False))"
)
_MARKERS = (ALL_MESSAGES, ALL_MESSAGES_EVENTS, FINAL_RESULT, "logfire.msg", "agent_name")


def matches(span: SpanRecord) -> bool:
    scope = span.scope_name or ""
    return scope.startswith(("pydantic-ai", "pydantic_ai", "logfire")) or any(
        key in span.attributes for key in _MARKERS
    )


def kind_of(span: SpanRecord) -> ViewKind | None:
    kind = semconv.kind_of(span)
    if kind is None and ("agent_name" in span.attributes or FINAL_RESULT in span.attributes):
        return "agent"  # the agent run of releases before the semconv operation names
    return kind


def read(view: GenAIView) -> None:
    a = view.span.attributes
    view.kind = kind_of(view.span)
    view.agent_name = _str(a.get(attrs.GEN_AI_AGENT_NAME)) or _str(a.get("agent_name"))
    metadata = maybe_json(a.get("metadata"))
    if isinstance(metadata, Mapping):
        view.user_id = _str(metadata.get("user_id"))
        view.conversation_id = _str(metadata.get("session_id")) or _str(
            metadata.get("conversation_id")
        )
    history = semconv.messages(view, ALL_MESSAGES, "input") or semconv.messages(
        view, ALL_MESSAGES_EVENTS, "input"
    )
    if view.kind == "agent":
        if history:
            view.input_text = last_user_text(history)
        final = semconv.raw(view, FINAL_RESULT, "actual_output")
        if final is not None:
            view.output_text = captured_text(maybe_json(final), OUTPUT_KEYS, want_input=False)
        elif history:
            last = [m for m in history if role(m) in ASSISTANT_ROLES][-1:]
            view.output_text = assistant_text(last)
    semconv.read(view)
    if view.kind in ("agent", "llm") and _content_dropped(view, history):
        view.capture_off = CAPTURE_SETTING


def _content_dropped(view: GenAIView, history: list[Any] | None) -> bool:
    """Text parts present without their content: the structure was kept, the text left out."""
    if view.input_text or view.output_text:
        return False
    found = history or semconv.messages(view, attrs.GEN_AI_INPUT_MESSAGES, "input") or []
    for message in found:
        parts = message.get("parts") if isinstance(message, Mapping) else None
        for part in parts or ():
            if isinstance(part, Mapping) and part.get("type") == "text" and "content" not in part:
                return True
    return False


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
