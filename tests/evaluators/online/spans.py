"""Hand-built SpanRecords in the shapes our tracer writes (tracer/attributes.py) and in the
shapes other instrumentations write."""

from __future__ import annotations

import itertools
import json
from typing import Any

from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge.tracer import _attributes as attrs

_ids = itertools.count(1)


def semconv_messages(*pairs: tuple[str, str]) -> str:
    """``gen_ai.input/output.messages`` JSON: [{"role", "parts": [{"type": "text", ...}]}]."""
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in pairs]
    )


class Trace:
    """Builds the spans of one trace; start times follow creation order unless given."""

    def __init__(self, service: str = "shop", trace_id: str | None = None) -> None:
        self.trace_id = trace_id or f"{next(_ids):032x}"
        self.service = service
        self.spans: list[SpanRecord] = []
        self._clock = itertools.count(1_000, 10)

    def span(
        self,
        name: str,
        parent: SpanRecord | None = None,
        attributes: dict[str, Any] | None = None,
        events: list[SpanEvent] | None = None,
        start: int | None = None,
    ) -> SpanRecord:
        start = next(self._clock) if start is None else start
        record = SpanRecord(
            trace_id=self.trace_id,
            span_id=f"{next(_ids):016x}",
            name=name,
            start_time_unix_nano=start,
            end_time_unix_nano=start + 5,
            parent_span_id=parent.span_id if parent else None,
            attributes=dict(attributes or {}),
            resource={"service.name": self.service},
            events=list(events or []),
        )
        self.spans.append(record)
        return record

    # --- our tracer's shapes ------------------------------------------------------------
    def agent(
        self,
        name: str = "support",
        user: str | None = "Where is my order?",
        answer: str | None = "It ships tomorrow.",
        parent: SpanRecord | None = None,
        conversation_id: str | None = None,
        start: int | None = None,
        **extra: Any,
    ) -> SpanRecord:
        a: dict[str, Any] = {
            attrs.GEN_AI_OPERATION_NAME: "invoke_agent",
            attrs.SPANJUDGE_KIND: "agent",
            attrs.GEN_AI_AGENT_NAME: name,
        }
        if user is not None:
            a[attrs.GEN_AI_INPUT_MESSAGES] = semconv_messages(("user", user))
        if answer is not None:
            a[attrs.GEN_AI_OUTPUT_MESSAGES] = semconv_messages(("assistant", answer))
        if conversation_id is not None:
            a[attrs.GEN_AI_CONVERSATION_ID] = conversation_id
        a.update(extra)
        return self.span(attrs.span_name("agent", name), parent, a, start=start)

    def llm(
        self,
        user: str = "Where is my order?",
        answer: str = "It ships tomorrow.",
        parent: SpanRecord | None = None,
        model: str = "gpt-4o-mini",
        system: str | None = None,
        **extra: Any,
    ) -> SpanRecord:
        pairs = ([("system", system)] if system else []) + [("user", user)]
        a: dict[str, Any] = {
            attrs.GEN_AI_OPERATION_NAME: "chat",
            attrs.SPANJUDGE_KIND: "llm",
            attrs.GEN_AI_REQUEST_MODEL: model,
            attrs.GEN_AI_INPUT_MESSAGES: semconv_messages(*pairs),
            attrs.GEN_AI_OUTPUT_MESSAGES: semconv_messages(("assistant", answer)),
        }
        a.update(extra)
        return self.span(attrs.span_name("llm", model), parent, a)

    def retriever(
        self, docs: list[str], parent: SpanRecord | None = None, name: str = "kb", **extra: Any
    ) -> SpanRecord:
        a: dict[str, Any] = {
            attrs.GEN_AI_OPERATION_NAME: "retrieval",
            attrs.SPANJUDGE_KIND: "retriever",
            attrs.GEN_AI_RETRIEVAL_QUERY_TEXT: "order status",
            attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT: json.dumps(docs),
        }
        a.update(extra)
        return self.span(attrs.span_name("retriever", name), parent, a)

    def tool(
        self,
        name: str,
        arguments: Any = None,
        result: Any = None,
        parent: SpanRecord | None = None,
        **extra: Any,
    ) -> SpanRecord:
        a: dict[str, Any] = {
            attrs.GEN_AI_OPERATION_NAME: "execute_tool",
            attrs.SPANJUDGE_KIND: "tool",
            attrs.GEN_AI_TOOL_NAME: name,
        }
        if arguments is not None:
            a[attrs.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(arguments)
        if result is not None:
            a[attrs.GEN_AI_TOOL_CALL_RESULT] = json.dumps(result)
        a.update(extra)
        return self.span(attrs.span_name("tool", name), parent, a)
