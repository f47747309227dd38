"""OpenLLMetry (Traceloop's SDK and its instrumentations, LangChain's included):
``traceloop.span.kind`` (``workflow``, ``agent``, ``task``, ``tool``), the JSON
``traceloop.entity.input`` (``{"args": [...], "kwargs": {...}}``) / ``traceloop.entity.output``
and their newer twins ``gen_ai.task.input`` / ``gen_ai.task.output``, association properties
(``traceloop.association.properties.session_id`` / ``user_id``), ``llm.request.type``, the
``vector_db_retrieve`` operation, and LLM spans in the GenAI semconv (current or the older
indexed ``gen_ai.prompt.N.*``).

Kinds: ``agent`` and ``workflow`` spans are agent turns (a workflow is Traceloop's top-level unit
of work); a ``task`` is a retrieval when its operation is ``vector_db_retrieve``, its name says
retrieval, or its output is a list of documents; ``TRACELOOP_TRACE_CONTENT=false`` leaves no
content, which ``capture_off`` names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import semconv
from spanjudge.evaluators._rebuild.dialects.message_text import (
    DOC_TEXT_KEYS,
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

NAME = "openllmetry"

SPAN_KIND = "traceloop.span.kind"
ENTITY_INPUT = "traceloop.entity.input"
ENTITY_OUTPUT = "traceloop.entity.output"
TASK_INPUT = "gen_ai.task.input"
TASK_OUTPUT = "gen_ai.task.output"
ASSOCIATION = "traceloop.association.properties."
CAPTURE_SETTING = "OpenLLMetry content tracing is off (TRACELOOP_TRACE_CONTENT=false)"
_SESSION_KEYS = ("session_id", "conversation_id", "thread_id", "chat_id")
_KINDS: dict[str, ViewKind] = {"agent": "agent", "workflow": "agent", "tool": "tool"}
_RETRIEVAL_WORDS = ("retriev", "vector_db", "search_docs")


def matches(span: SpanRecord) -> bool:
    a = span.attributes
    return (
        SPAN_KIND in a
        or ENTITY_INPUT in a
        or attrs.LLM_REQUEST_TYPE in a
        or any(key.startswith(ASSOCIATION) for key in a)
    )


def read(view: GenAIView) -> None:
    a = view.span.attributes
    view.kind = kind_of(view.span)
    for key in _SESSION_KEYS:
        view.conversation_id = view.conversation_id or _str(a.get(ASSOCIATION + key))
    view.user_id = _str(a.get(ASSOCIATION + "user_id"))
    if view.kind == "agent":
        view.agent_name = _str(a.get(attrs.GEN_AI_AGENT_NAME)) or _str(
            a.get("traceloop.entity.name")
        )
    entity_in = _entity(view, ENTITY_INPUT, TASK_INPUT, "input")
    entity_out = _entity(view, ENTITY_OUTPUT, TASK_OUTPUT, "actual_output")
    if view.kind in ("agent", "chain"):
        view.input_text = _text(entity_in, want_input=True)
        view.output_text = _text(entity_out, want_input=False)
    elif view.kind == "retriever":
        view.input_text = _text(entity_in, want_input=True)
        view.documents = [Document(t) for t in document_texts(entity_out)]
    elif view.kind == "tool":
        view.tool = ToolCallView(
            name=_str(a.get("traceloop.entity.name")) or view.span.name,
            arguments=_arguments(entity_in),
            result=entity_out,
        )
    semconv.read(view)
    # a workflow or task without entity input/output is no evidence (LlamaIndex's workflow
    # spans lose theirs with content on); a model call, tool or retrieval without is
    if view.kind in ("llm", "tool", "retriever") and _no_content(a):
        view.capture_off = CAPTURE_SETTING


def kind_of(span: SpanRecord) -> ViewKind | None:
    a = span.attributes
    operation = a.get(attrs.GEN_AI_OPERATION_NAME)
    if operation == "vector_db_retrieve" or span.name.startswith("vector_db_retrieve"):
        return "retriever"
    if a.get(attrs.LLM_REQUEST_TYPE) in ("chat", "completion"):
        return "llm"
    if operation in attrs.LLM_OPERATIONS:  # a model call, whatever traceloop.span.kind says
        return "llm"
    loop_kind = a.get(SPAN_KIND)
    if loop_kind in _KINDS:
        return _KINDS[str(loop_kind)]
    if loop_kind == "task":
        name = str(a.get("traceloop.entity.name") or span.name).lower()
        if any(word in name for word in _RETRIEVAL_WORDS) or _is_documents(
            maybe_json(a.get(ENTITY_OUTPUT) or a.get(TASK_OUTPUT))
        ):
            return "retriever"
        return "chain"
    return semconv.kind_of(span)


def _is_documents(value: Any) -> bool:
    if isinstance(value, Mapping) and isinstance(value.get("documents"), list):
        value = value["documents"]
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(item, Mapping) and any(k in item for k in DOC_TEXT_KEYS) for item in value
        )
    )


def _entity(view: GenAIView, key: str, newer: str, field_name: str) -> Any:
    value = semconv.raw(view, key, field_name)
    if value is None:
        value = semconv.raw(view, newer, field_name)
    return maybe_json(value)


def _arguments(value: Any) -> Any:
    """``{"args": [...], "kwargs": {...}}`` as the call's parameters."""
    if isinstance(value, Mapping) and ("args" in value or "kwargs" in value):
        args = value.get("args") or []
        kwargs = value.get("kwargs") or {}
        if not args and isinstance(kwargs, Mapping):
            return dict(kwargs)
        return {"args": args, **(kwargs if isinstance(kwargs, Mapping) else {})}
    return value


def _text(value: Any, *, want_input: bool) -> str | None:
    if value is None:
        return None
    if want_input:
        if isinstance(value, Mapping) and isinstance(value.get("inputs"), Mapping | str):
            value = value["inputs"]  # LangChain chain input as Traceloop records it
        else:
            value = _arguments(value)
        if isinstance(value, Mapping) and set(value) == {"args"} and len(value["args"]) == 1:
            value = value["args"][0]
    elif isinstance(value, Mapping) and isinstance(value.get("outputs"), Mapping | str):
        value = value["outputs"]
    keys = INPUT_KEYS if want_input else OUTPUT_KEYS
    return captured_text(value, keys, want_input)


def _no_content(a: Mapping[str, Any]) -> bool:
    content_keys = (
        ENTITY_INPUT,
        ENTITY_OUTPUT,
        TASK_INPUT,
        TASK_OUTPUT,
        attrs.GEN_AI_INPUT_MESSAGES,
        attrs.GEN_AI_OUTPUT_MESSAGES,
        attrs.GEN_AI_PROMPT + ".0.content",
        attrs.GEN_AI_COMPLETION + ".0.content",
    )
    return not any(key in a for key in content_keys)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
