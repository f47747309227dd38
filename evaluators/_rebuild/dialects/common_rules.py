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
* **Read the shapes a general rule knows** (:mod:`.text_shapes`): a field-marker template's
  question or answer field, the ``content=`` of message reprs nested in JSON, documents the
  prompt carries in a marked block (``<memory>``, ``<references>``, ``<context>`` ...: moved
  to ``view.prompt_documents``, the rest is the input). The rule is added to the field's
  ``found`` entry, so a case says which rule read it.
* **A tool named after its callable** is named after the tool (``refund.__call__``,
  ``Tools.refund``, ``tool:refund``: ``refund``; :func:`.tool_calls.callable_tool_name`).
* **Where each field came from** (``view.found``): the dialect's attributes unless the reader
  said otherwise (an event).

Example::

    view = GenAIView(span); dialect.read(view); finish(view)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spanjudge.evaluators._rebuild.dialects.capture_switches import missing_content
from spanjudge.evaluators._rebuild.dialects.message_text import is_placeholder, maybe_json
from spanjudge.evaluators._rebuild.dialects.text_shapes import (
    CONTEXT_FIELDS,
    PROMPT_BLOCK_RULE,
    REPR_RULE,
    TEMPLATE_RULE,
    Want,
    has_placeholder,
    is_template,
    repr_message_text,
    template_field,
    template_sections,
)
from spanjudge.evaluators._rebuild.dialects.tool_calls import CALLABLE_RULE, callable_tool_name
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


# a block of documents the prompt carries, marked by a tag of a name that says so
_PROMPT_BLOCK = re.compile(
    r"(?is)<(memory|memories|references?|context|contexts|documents?|docs|sources|knowledge"
    r"|retrieved[_a-z]*|search_results)(?:\s[^<>]{0,200})?>(.*?)</\1\s*>"
)
_BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def finish(view: GenAIView) -> None:
    """Apply the general rules above to ``view`` (read by its dialect). Never raises."""
    span = view.span
    rules = _read_shapes(view)
    if view.tool is not None:
        named = callable_tool_name(view.tool.name)
        if named != view.tool.name:
            view.tool.name = named
            rules["tool"] = f"{CALLABLE_RULE} ({view.tool.name!r} from {span.name!r})"
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
        _explain_missing_text(view)
    where = f"{view.dialect} attributes" if view.dialect else "attributes"
    for field_name, attr in (*_TEXT_FIELDS, ("retrieval_context", "documents")):
        if getattr(view, attr):
            view.source(field_name, where)
    for field_name, rule in rules.items():
        view.found[field_name] = f"{view.found.get(field_name, where)}, rule: {rule}"


def _read_shapes(view: GenAIView) -> dict[str, str]:
    """Read the input and output shapes a general rule knows (see the module docstring);
    returns field -> the rule that read it."""
    rules: dict[str, str] = {}
    text_in = view.input_text
    if isinstance(text_in, str) and is_template(text_in, "input"):
        # a template's context fields are context, its question field the input (below)
        view.prompt_documents = template_sections(text_in, CONTEXT_FIELDS)
    elif isinstance(text_in, str) and "</" in text_in:
        blocks = list(_PROMPT_BLOCK.finditer(text_in[:200_000]))
        rest = _PROMPT_BLOCK.sub("", text_in[:200_000]) + text_in[200_000:] if blocks else ""
        rest = _BLANK_RUN.sub("\n\n", rest).strip()
        if blocks and rest:
            view.prompt_documents = [b.group(2).strip() for b in blocks if b.group(2).strip()]
            view.input_text = rest
            names = ", ".join(dict.fromkeys(f"<{b.group(1).lower()}>" for b in blocks))
            rules["input"] = f"{PROMPT_BLOCK_RULE} ({names} taken out as context)"
    for field_name, attr, want in (
        ("input", "input_text", "input"),
        ("actual_output", "output_text", "output"),
    ):
        value = getattr(view, attr)
        if not isinstance(value, str) or not value.strip():
            continue
        read = _shape_reading(value, want)  # type: ignore[arg-type]
        if read is not None:
            setattr(view, attr, read[0])
            rules[field_name] = "; ".join(r for r in (rules.get(field_name), read[1]) if r)
    return rules


def _shape_reading(value: str, want: Want) -> tuple[str, str] | None:
    """``(text, rule)`` when ``value`` is a shape a rule reads, else ``None`` (also when the rule
    finds nothing: the plausibility gate refuses the value then, naming the rule)."""
    if is_template(value, want):
        found = template_field(value, want)
        return (found, TEMPLATE_RULE) if found else None
    if has_placeholder(value):
        found = repr_message_text(value, want)
        return (found, REPR_RULE) if found else None
    return None


def _explain_missing_text(view: GenAIView) -> None:
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
        view.capture_off = missing_content(span)


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
