"""LiteLLM's own OpenTelemetry callback (``litellm.callbacks = ["otel"]``): a ``litellm_request``
span in the GenAI semconv (current messages, or the older indexed ``gen_ai.prompt.N.*``) with a
``raw_gen_ai_request`` child, ``llm.user``, and the request ``metadata`` flattened as
``metadata.<key>`` (``metadata.session_id`` is read as the conversation)."""

from __future__ import annotations

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import semconv
from spanjudge.evaluators._rebuild.dialects.view import GenAIView, ViewKind

NAME = "litellm"

_RAW_REQUEST = "raw_gen_ai_request"


def matches(span: SpanRecord) -> bool:
    return span.scope_name == "litellm" or span.name in ("litellm_request", _RAW_REQUEST)


def kind_of(span: SpanRecord) -> ViewKind | None:
    if span.name == _RAW_REQUEST:
        return None  # the provider request under litellm_request: the same call again
    return semconv.kind_of(span) or "llm"


def read(view: GenAIView) -> None:
    a = view.span.attributes
    view.kind = kind_of(view.span)
    if view.kind is None:
        return
    for key in ("metadata.session_id", "metadata.conversation_id"):
        value = a.get(key)
        if isinstance(value, str) and value and view.conversation_id is None:
            view.conversation_id = value
    user = a.get("llm.user") or a.get("metadata.user_id")
    view.user_id = user if isinstance(user, str) and user else None
    semconv.read(view)
