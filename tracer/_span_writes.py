"""Writing captured values onto a span, per kind, through the capture policy.

Shared by ``@observe`` (return values, streamed chunks) and the span handle (``set_output``).
Every function here is called inside a ``try`` by its caller: capture never raises into the app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import _messages as messages


def span_attributes(span: Any) -> Mapping[str, Any]:
    found = getattr(span, "attributes", None)
    return found if found is not None else {}


def put(out: dict[str, Any], key: str, text: str) -> None:
    """Stage a content attribute after PII masking, redaction and the size limit."""
    value, cut = capture.finish(key, text)
    if cut:
        out.setdefault(attrs.SPANJUDGE_TRUNCATED, []).append(key)
    out[key] = value


def apply(span: Any, out: dict[str, Any]) -> None:
    """Set the staged attributes in one call (one lock round-trip in the SDK)."""
    if not out:
        return
    cut = out.get(attrs.SPANJUDGE_TRUNCATED)
    if cut:
        previous = span_attributes(span).get(attrs.SPANJUDGE_TRUNCATED) or ()
        out[attrs.SPANJUDGE_TRUNCATED] = sorted({*previous, *cut})
    span.set_attributes(out)


def output_json(value: Any) -> str:
    """Assistant output messages (semconv JSON) from a response, a string or anything else."""
    if isinstance(value, str):
        return messages.text_message_json("assistant", value, "stop")
    msgs = messages.output_messages(value)
    if msgs is None:
        return messages.text_message_json("assistant", capture.serialize(value), "stop")
    return capture.dumps(msgs)


_POSITION_REFS = tuple(f'{{"id":"{i}"}}' for i in range(256))


def write_documents(span: Any, documents: Any, out: dict[str, Any], content: bool) -> None:
    """``gen_ai.retrieval.documents`` (id, score) and, with content on, their text."""
    if documents is None:
        return
    if isinstance(documents, (str, bytes)) or not hasattr(documents, "__iter__"):
        documents = [documents]
    if (
        type(documents) is list
        and len(documents) <= len(_POSITION_REFS)
        and all(type(doc) is str for doc in documents)
    ):
        # plain texts (the common retriever return): ids are positions, no scores
        put(
            out,
            attrs.GEN_AI_RETRIEVAL_DOCUMENTS,
            "[" + ",".join(_POSITION_REFS[: len(documents)]) + "]",
        )
        if content:
            put(out, attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT, capture.dumps(documents))
        return
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
    put(out, attrs.GEN_AI_RETRIEVAL_DOCUMENTS, capture.dumps(refs))
    if content:
        put(out, attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT, capture.dumps(texts))


def write_llm_response(
    span: Any,
    response: Any,
    out: dict[str, Any],
    content: bool,
    existing: Mapping[str, Any] | None = None,
) -> None:
    """Usage, response model/id, finish reasons and (content on) output messages.

    ``existing``: the span's attributes so far (read from the span when not given).
    """
    if existing is None:
        existing = span_attributes(span)
    if not isinstance(response, str) and response is not None:
        if attrs.GEN_AI_USAGE_INPUT_TOKENS not in existing:
            inp, outp = messages.usage_of(response)
            if inp is not None:
                out[attrs.GEN_AI_USAGE_INPUT_TOKENS] = inp
            if outp is not None:
                out[attrs.GEN_AI_USAGE_OUTPUT_TOKENS] = outp
        model = messages.field(response, "model")
        if isinstance(model, str) and model:
            out[attrs.GEN_AI_RESPONSE_MODEL] = model
            if attrs.GEN_AI_REQUEST_MODEL not in existing:
                # The request model was not known up front: name the span after the response's.
                out[attrs.GEN_AI_REQUEST_MODEL] = model
                span.update_name(attrs.span_name("llm", model))
        response_id = messages.field(response, "id")
        if isinstance(response_id, str):
            out[attrs.GEN_AI_RESPONSE_ID] = response_id
        reasons = messages.finish_reasons(response)
        if reasons:
            out[attrs.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    if content and response is not None and attrs.GEN_AI_OUTPUT_MESSAGES not in existing:
        put(out, attrs.GEN_AI_OUTPUT_MESSAGES, output_json(response))


def write_output(
    span: Any,
    kind: str,
    value: Any,
    out: dict[str, Any],
    explicit: bool,
    existing: Mapping[str, Any] | None = None,
) -> None:
    """Record ``value`` as the span's output in its kind's attribute.

    ``explicit`` (from the span handle) overwrites; the decorator's own write (``explicit=False``)
    leaves a value the user already set alone.
    """
    content = capture.POLICY.content
    if kind == "llm":
        if explicit and content:
            put(out, attrs.GEN_AI_OUTPUT_MESSAGES, output_json(value))
            return
        write_llm_response(span, value, out, content, existing)
        return
    if kind == "retriever":
        if existing is None:
            existing = span_attributes(span)
        if explicit or attrs.GEN_AI_RETRIEVAL_DOCUMENTS not in existing:
            write_documents(span, value, out, content)
        return
    if not content:
        return
    key = {
        "agent": attrs.GEN_AI_OUTPUT_MESSAGES,
        "tool": attrs.GEN_AI_TOOL_CALL_RESULT,
    }.get(kind, attrs.SPANJUDGE_OUTPUT)
    if not explicit and key in (span_attributes(span) if existing is None else existing):
        return
    if kind == "agent":
        put(out, key, output_json(value))
    else:
        put(out, key, capture.dumps(value))
