"""OpenLIT (``openlit.init()``): GenAI semconv spans under the ``openlit`` scopes, with its own
agent and retrieval spans; a retrieval lists its documents (``id``, ``score``, ``text``) in
``gen_ai.output.messages``; ``user.id``; message content also sent as
``gen_ai.client.inference.operation.details`` log records (joined like any content event)."""

from __future__ import annotations

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import semconv
from spanjudge.evaluators._rebuild.dialects.message_text import document_texts
from spanjudge.evaluators._rebuild.dialects.view import Document, GenAIView
from spanjudge.tracer import _attributes as attrs

NAME = "openlit"


def matches(span: SpanRecord) -> bool:
    return (span.scope_name or "").startswith("openlit")


kind_of = semconv.kind_of


def read(view: GenAIView) -> None:
    a = view.span.attributes
    view.kind = kind_of(view.span)
    user = a.get("user.id")
    view.user_id = user if isinstance(user, str) and user else None
    if view.kind == "retriever":
        value = semconv.raw(view, attrs.GEN_AI_OUTPUT_MESSAGES, "retrieval_context")
        texts = document_texts(value)
        if texts:
            view.documents = [Document(t) for t in texts]
        query = a.get(attrs.GEN_AI_RETRIEVAL_QUERY_TEXT)
        view.input_text = query if isinstance(query, str) and query else None
        view.output_text = "\n".join(texts) if texts else None
    semconv.read(view)
