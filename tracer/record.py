"""Writing captured values onto a span, per kind, through the capture policy.

Shared by ``@observe`` (return values, streamed chunks) and the span handle (``set_output``).
Every function here is called inside a ``try`` by its caller: capture never raises into the app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanjudge.tracer import attributes as attrs
from spanjudge.tracer import capture, messages


def span_attributes(span: Any) -> Mapping[str, Any]:
    found = getattr(span, "attributes", None)
    return found if found is not None else {}


def put(span: Any, key: str, text: str, truncated: list[str]) -> None:
    """Set a content attribute after PII masking, redaction and the size limit."""
    value, cut = capture.finish(key, text)
    if cut:
        truncated.append(key)
    span.set_attribute(key, value)


def flush_truncated(span: Any, truncated: list[str]) -> None:
    if truncated:
        previous = span_attributes(span).get(attrs.SPANJUDGE_TRUNCATED) or ()
        span.set_attribute(attrs.SPANJUDGE_TRUNCATED, sorted({*previous, *truncated}))


def write_documents(span: Any, documents: Any, truncated: list[str], content: bool) -> None:
    """``gen_ai.retrieval.documents`` (id, score) and, with content on, their text."""
    if documents is None:
        return
    if isinstance(documents, (str, bytes)) or not hasattr(documents, "__iter__"):
        documents = [documents]
    refs: list[dict[str, Any]] = []
    texts: list[Any] = []
    for i, doc in enumerate(documents):
        if i >= capture.MAX_ITEMS:
            break
        doc_id, score, text = messages.document_fields(doc)
        ref: dict[str, Any] = {"id": str(doc_id) if doc_id is not None else str(i)}
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            ref["score"] = float(score)
        refs.append(ref)
        texts.append(text if isinstance(text, str) else capture.serialize(doc))
    put(span, attrs.GEN_AI_RETRIEVAL_DOCUMENTS, capture.dumps(refs), truncated)
    if content:
        put(span, attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT, capture.dumps(texts), truncated)


def write_llm_response(span: Any, response: Any, truncated: list[str], content: bool) -> None:
    """Usage, response model/id, finish reasons and (content on) output messages."""
    existing = span_attributes(span)
    if not isinstance(response, str) and response is not None:
        if attrs.GEN_AI_USAGE_INPUT_TOKENS not in existing:
            inp, out = messages.usage_of(response)
            if inp is not None:
                span.set_attribute(attrs.GEN_AI_USAGE_INPUT_TOKENS, inp)
            if out is not None:
                span.set_attribute(attrs.GEN_AI_USAGE_OUTPUT_TOKENS, out)
        model = messages.field(response, "model")
        if isinstance(model, str) and model:
            span.set_attribute(attrs.GEN_AI_RESPONSE_MODEL, model)
            if attrs.GEN_AI_REQUEST_MODEL not in existing:
                # The request model was not known up front: name the span after the response's.
                span.set_attribute(attrs.GEN_AI_REQUEST_MODEL, model)
                span.update_name(attrs.span_name("llm", model))
        response_id = messages.field(response, "id")
        if isinstance(response_id, str):
            span.set_attribute(attrs.GEN_AI_RESPONSE_ID, response_id)
        reasons = messages.finish_reasons(response)
        if reasons:
            span.set_attribute(attrs.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
    if content and attrs.GEN_AI_OUTPUT_MESSAGES not in existing:
        out_messages = messages.output_messages(response)
        if out_messages is None and response is not None:
            out_messages = [messages.text_message("assistant", capture.serialize(response), "stop")]
        if out_messages is not None:
            put(span, attrs.GEN_AI_OUTPUT_MESSAGES, capture.dumps(out_messages), truncated)


def write_output(span: Any, kind: str, value: Any, truncated: list[str], explicit: bool) -> None:
    """Record ``value`` as the span's output in its kind's attribute.

    ``explicit`` (from the span handle) overwrites; the decorator's own write (``explicit=False``)
    leaves a value the user already set alone.
    """
    content = capture.POLICY.content
    if kind == "llm":
        if explicit and content:
            out = messages.output_messages(value) or [
                messages.text_message("assistant", capture.serialize(value), "stop")
            ]
            put(span, attrs.GEN_AI_OUTPUT_MESSAGES, capture.dumps(out), truncated)
            return
        write_llm_response(span, value, truncated, content)
        return
    if kind == "retriever":
        if explicit or attrs.GEN_AI_RETRIEVAL_DOCUMENTS not in span_attributes(span):
            write_documents(span, value, truncated, content)
        return
    if not content:
        return
    key = {
        "agent": attrs.GEN_AI_OUTPUT_MESSAGES,
        "tool": attrs.GEN_AI_TOOL_CALL_RESULT,
    }.get(kind, attrs.SPANJUDGE_OUTPUT)
    if not explicit and key in span_attributes(span):
        return
    if kind == "agent":
        out = messages.output_messages(value)
        if out is None:
            out = [messages.text_message("assistant", capture.serialize(value), "stop")]
        put(span, key, capture.dumps(out), truncated)
    else:
        put(span, key, capture.dumps(value), truncated)
