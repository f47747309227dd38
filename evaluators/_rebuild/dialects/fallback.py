"""The last resort: a model call recognised by what it holds, for libraries no dialect names.

A span that no other dialect matches is read as a model call (``llm``) when an input-like
attribute (a key ending in ``input``, ``inputs``, ``input_data``, ``input.value``...) holds chat
messages with a user message, and an output-like attribute holds an assistant message: e.g.
Haystack's ``haystack.component.input`` = ``{"messages": [...]}`` and
``haystack.component.output`` = ``{"replies": [{"role": "assistant", ...}]}``. The model name
is read from any ``model`` key beside the messages. Such a span's ``dialect`` is ``generic``,
and a case rebuilt from it says so in ``found_by``: it is an inference, and a rule with
``inferred_fields = false`` does not score it.

The check is cheap for the spans it does not match (one pass over the attribute keys), since
the receiver asks every span's kind: JSON is parsed only under an input-like and an output-like
key both present.

Example::

    span.attributes = {"x.input": '{"messages": [{"role": "user", "content": "Hi"}]}',
                       "x.output": '{"replies": [{"role": "assistant", "content": "Hello"}]}'}
    read_span(span).kind  # "llm"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects.message_text import (
    assistant_text,
    is_message,
    last_user_text,
    maybe_json,
    role,
    system_text,
)
from spanjudge.evaluators._rebuild.dialects.view import GenAIView, ViewKind

NAME = "generic"
RULE = "model call (chat messages in, an assistant message out)"
_INPUT_SUFFIXES = ("input", "inputs", "input_data", "input.value", "request")
_OUTPUT_SUFFIXES = ("output", "outputs", "output_data", "output.value", "response")


def matches(span: SpanRecord) -> bool:
    return _read(span) is not None


def kind_of(span: SpanRecord) -> ViewKind | None:
    return "llm" if matches(span) else None


def read(view: GenAIView) -> None:
    found = _read(view.span)
    if found is None:
        return
    inputs, outputs, where = found
    view.kind = "llm"
    view.input_text = last_user_text(inputs)
    view.system_text = system_text(inputs)
    view.output_text = assistant_text(outputs)
    view.model = _model(outputs) or _model(inputs)
    for field_name in ("input", "system", "actual_output"):
        view.source(field_name, f"inferred: {RULE}, {where}")


def _read(span: SpanRecord) -> tuple[list[Any], list[Any], str] | None:
    a = span.attributes
    ins = [k for k in a if isinstance(a[k], str) and k.endswith(_INPUT_SUFFIXES)]
    if not ins:
        return None
    outs = [k for k in a if isinstance(a[k], str) and k.endswith(_OUTPUT_SUFFIXES)]
    if not outs:
        return None
    for in_key in ins:
        inputs = _messages(a[in_key], want_role="user")
        if inputs is None:
            continue
        for out_key in outs:
            outputs = _messages(a[out_key], want_role="assistant")
            if outputs is not None:
                return inputs, outputs, f"{in_key} -> {out_key}"
    return None


def _messages(raw: str, want_role: str) -> list[Any] | None:
    """The message list in ``raw`` (a list, or a mapping holding one) when one of its messages
    has ``want_role``."""
    parsed = maybe_json(raw)
    candidates: list[list[Any]] = []
    if isinstance(parsed, list):
        candidates.append(parsed)
    elif isinstance(parsed, Mapping):
        candidates.extend(v for v in parsed.values() if isinstance(v, list))
        if is_message(parsed):
            candidates.append([parsed])
    for items in candidates:
        if any(is_message(m) and role(m) == want_role for m in items):
            return items
    return None


def _model(messages: list[Any]) -> str | None:
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        for holder in (message, message.get("meta"), message.get("metadata")):
            if isinstance(holder, Mapping) and isinstance(holder.get("model"), str):
                return str(holder["model"])
    return None
