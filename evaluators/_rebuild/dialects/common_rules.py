"""Rules that hold for every dialect, applied to a span's view after its dialect read it.

* **No Python reprs.** A text field or document that is a repr or an object placeholder
  (:func:`~spanjudge.evaluators._rebuild.dialects.message_text.is_placeholder`) is dropped, and
  the field's note says so: ``input.value on span ... holds a Python repr (ChatMessage(...)``.
* **Blame a capture setting only on evidence.** A model call (``llm``) always has an input; when
  it has no text and nothing else explains why, its content was not captured, and the view names
  the setting. An agent span without text of its own is not evidence of anything: many
  frameworks keep the text on the model calls inside the turn (the case rebuild says "no text
  of its own" when those have none either). A content event that is present but unreadable is
  named as such.
* **Where each field came from** (``view.found``): the dialect's attributes unless the reader
  said otherwise (an event).

Example::

    view = GenAIView(span); dialect.read(view); finish(view, CAPTURE_SETTING)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanjudge.evaluators._rebuild.dialects.message_text import is_placeholder, maybe_json
from spanjudge.evaluators._rebuild.dialects.view import GenAIView

# attribute keys that hold a span's own input or output under some library's name
_INPUT_SUFFIXES = ("input", "input.value", "inputs", "entity.input", "prompt")
_OUTPUT_SUFFIXES = ("output", "output.value", "outputs", "entity.output", "completion", "result")
_TEXT_FIELDS = (
    ("input", "input_text"),
    ("actual_output", "output_text"),
    ("system", "system_text"),
)
# events that carry message content, by any convention we read
CONTENT_EVENTS = frozenset(
    {
        "gen_ai.user.message",
        "gen_ai.system.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.content.prompt",
        "gen_ai.content.completion",
        "gen_ai.client.inference.operation.details",
    }
)


def finish(view: GenAIView, capture_setting: str) -> None:
    """Apply the general rules above to ``view`` (read by its dialect). Never raises."""
    span = view.span
    for field_name, attr in _TEXT_FIELDS:
        value = getattr(view, attr)
        if isinstance(value, str) and is_placeholder(value):
            setattr(view, attr, None)
            view.note(field_name, _repr_note(span.span_id, "a value", value))
    if view.kind == "retriever" and not view.document_texts:
        hit = _placeholder_attribute(span.attributes, _OUTPUT_SUFFIXES)
        if hit is not None:
            view.note(
                "retrieval_context",
                f"retriever span {span.span_id} ({span.name!r}) lists only Python reprs, no "
                f"document text ({hit[0]}: {hit[1].strip()[:60]}...)",
            )
    if view.documents:
        dropped = 0
        for doc in view.documents:
            if doc.text is not None and is_placeholder(doc.text):
                doc.text, dropped = None, dropped + 1
        if dropped and not view.document_texts:
            view.note(
                "retrieval_context",
                f"retriever span {span.span_id} ({span.name!r}) lists only Python reprs of its "
                f"{dropped} document(s), no document text",
            )
    for field_name, attr, suffixes in (
        ("input", "input_text", _INPUT_SUFFIXES),
        ("actual_output", "output_text", _OUTPUT_SUFFIXES),
    ):
        if view.kind not in ("llm", "agent"):
            break  # a tool or a chain without text is no news
        if getattr(view, attr) is None and field_name not in view.notes:
            hit = _placeholder_attribute(span.attributes, suffixes)
            if hit is not None:
                view.note(field_name, _repr_note(span.span_id, hit[0], hit[1]))
    if view.kind in ("llm", "agent"):
        _explain_missing_text(view, capture_setting)
    where = f"{view.dialect} attributes" if view.dialect else "attributes"
    for field_name, attr in (*_TEXT_FIELDS, ("retrieval_context", "documents")):
        if getattr(view, attr):
            view.source(field_name, where)


def _explain_missing_text(view: GenAIView, capture_setting: str) -> None:
    if view.input_text is not None or view.output_text is not None or view.notes:
        return
    span = view.span
    unreadable = sorted({e.name for e in span.events if e.name in CONTENT_EVENTS})
    if unreadable:
        why = (
            f"span {span.span_id} ({span.name!r}) has content event(s) {', '.join(unreadable)} "
            "that could not be read as text"
        )
        view.note("input", why)
        view.note("actual_output", why)
    elif view.kind == "llm" and view.capture_off is None:
        view.capture_off = capture_setting


def _placeholder_attribute(
    attributes: Mapping[str, Any], suffixes: tuple[str, ...]
) -> tuple[str, str] | None:
    for key, value in attributes.items():
        if not isinstance(value, str) or not key.endswith(suffixes):
            continue
        parsed = maybe_json(value)
        sample = _first_string(parsed)
        if sample is not None and is_placeholder(sample):
            return key, sample
    return None


def _first_string(value: Any, depth: int = 0) -> str | None:
    if isinstance(value, str):
        return value if value.strip() else None
    if depth > 4:
        return None
    items = value.values() if isinstance(value, Mapping) else value
    if isinstance(value, Mapping | list):
        for item in items:
            found = _first_string(item, depth + 1)
            if found is not None:
                return found
    return None


def _repr_note(span_id: str, where: str, value: str) -> str:
    sample = value.strip()[:60]
    return f"{where} on span {span_id} holds a Python repr ({sample}...), not text"
