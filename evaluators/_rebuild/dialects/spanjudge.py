"""Spans written by spanjudge's own ``@observe``: GenAI semconv attributes plus the project's
``spanjudge.*`` ones (``spanjudge.kind``, the captured ``spanjudge.input``/``spanjudge.output``
JSON, ``spanjudge.retrieval.documents.content`` beside the semconv document ids)."""

from __future__ import annotations

import json
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import semconv
from spanjudge.evaluators._rebuild.dialects.message_text import (
    INPUT_KEYS,
    OUTPUT_KEYS,
    captured_text,
    document_texts,
    maybe_json,
)
from spanjudge.evaluators._rebuild.dialects.view import (
    Document,
    GenAIView,
    ToolCallView,
    ViewKind,
)
from spanjudge.tracer import _attributes as attrs

NAME = "spanjudge"


_PREFIX = "spanjudge."


def matches(span: SpanRecord) -> bool:
    if span.scope_name == attrs.TRACER_NAME:
        return True
    return any(key.startswith(_PREFIX) for key in span.attributes)


def kind_of(span: SpanRecord) -> ViewKind | None:
    kind = span.attributes.get(attrs.SPANJUDGE_KIND)
    return semconv.kind_of(span) or (kind if kind in attrs.KINDS else None)


def read(view: GenAIView) -> None:
    a = view.span.attributes
    view.kind = kind_of(view.span)
    user = a.get(attrs.SPANJUDGE_USER_ID)
    view.user_id = user if isinstance(user, str) and user else None
    if view.kind == "retriever":
        _read_documents(view)
    semconv.read(view)
    # captured arguments / return value: the last resort for text
    if view.input_text is None:
        view.input_text = captured(view, attrs.SPANJUDGE_INPUT, "input")
    if view.output_text is None:
        view.output_text = captured(view, attrs.SPANJUDGE_OUTPUT, "actual_output")
    if view.kind == "tool" and view.tool is not None:
        tool = view.tool
        if tool.arguments is None:
            tool.arguments = _json(view, attrs.SPANJUDGE_INPUT, "tools_called")
        if tool.result is None:
            tool.result = _json(view, attrs.SPANJUDGE_OUTPUT, "tools_called")
    elif view.kind == "tool" and view.span.name:
        view.tool = ToolCallView(
            name=view.span.name,
            arguments=_json(view, attrs.SPANJUDGE_INPUT, "tools_called"),
            result=_json(view, attrs.SPANJUDGE_OUTPUT, "tools_called"),
        )


def _json(view: GenAIView, key: str, field_name: str) -> Any:
    value = semconv.raw(view, key, field_name)
    return maybe_json(value)


def captured(view: GenAIView, key: str, field_name: str) -> str | None:
    value = semconv.raw(view, key, field_name)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            hint = (
                " (cut by the tracer's size limit)"
                if key in semconv.truncated_keys(view.span)
                else ""
            )
            view.note(field_name, f"{key} on span {view.span.span_id} is not valid JSON{hint}")
            return None
    else:
        parsed = value
    keys = INPUT_KEYS if field_name == "input" else OUTPUT_KEYS
    return captured_text(parsed, keys, field_name == "input")


def _read_documents(view: GenAIView) -> None:
    value = semconv.raw(view, attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT, "retrieval_context")
    if value is None:
        return
    parsed = maybe_json(value)
    if isinstance(value, str) and parsed is value and value.lstrip()[:1] in ("[", "{"):
        hint = (
            " (cut by the tracer's size limit)"
            if attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT in semconv.truncated_keys(view.span)
            else ""
        )
        view.note(
            "retrieval_context",
            f"{attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT} on span {view.span.span_id} "
            f"is not valid JSON{hint}",
        )
        return
    texts = document_texts(parsed)
    ids = maybe_json(view.span.attributes.get(attrs.GEN_AI_RETRIEVAL_DOCUMENTS))
    docs = [Document(t) for t in texts]
    if isinstance(ids, list) and len(ids) == len(docs):
        for doc, item in zip(docs, ids, strict=True):
            if isinstance(item, dict):
                doc.id = str(item["id"]) if item.get("id") is not None else None
    view.documents = docs
