"""Text out of the values instrumentations write: messages in every common shape, captured
arguments, document lists, and JSON strings read within limits.

Pure functions; nothing here raises on odd values (wrong types, bad JSON, deep nesting).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

MAX_RAW_CHARS = 1_000_000
"""Longest raw attribute value parsed; longer ones are treated as missing."""

SYSTEM_ROLES = frozenset({"system", "developer"})
ASSISTANT_ROLES = frozenset({"assistant", "model", "ai"})
_TEXT_PART_TYPES = (None, "text", "input_text", "output_text")
DOC_TEXT_KEYS = ("content", "text", "page_content", "document", "pageContent")
INPUT_KEYS = ("input", "query", "question", "message", "prompt", "user_input", "text", "content")
OUTPUT_KEYS = (
    "output",
    "answer",
    "response",
    "content",
    "text",
    "result",
    "message",
    "completion",
)


def nonempty(text: Any) -> str | None:
    return text if isinstance(text, str) and text.strip() else None


def maybe_json(value: Any) -> Any:
    """``value`` parsed when it is a string that looks like JSON, else ``value`` itself."""
    if not isinstance(value, str):
        return value
    stripped = value.lstrip()
    if not stripped or stripped[0] not in '[{"' or len(value) > MAX_RAW_CHARS:
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping):
        if part.get("type") not in _TEXT_PART_TYPES:
            return None  # images, tool calls, reasoning: not conversation text
        for key in ("content", "text"):
            value = part.get(key)
            if isinstance(value, str):
                return value
    return None


def message_text(message: Any) -> str | None:
    """Text of one message in any of the semconv / OpenAI / choice / LangChain shapes."""
    if isinstance(message, str):
        return message
    if not isinstance(message, Mapping):
        return None
    inner = message.get("message")
    if isinstance(inner, Mapping):  # {"index": 0, "message": {...}} choice
        return message_text(inner)
    for key in ("parts", "content"):
        value = message.get(key)
        if isinstance(value, str) and key == "content":
            return value
        if isinstance(value, list):
            texts = [t for t in (part_text(p) for p in value) if t]
            return "\n".join(texts) if texts else None
    text = message.get("text")
    if isinstance(text, str):
        return text
    kwargs = message.get("kwargs")  # LangChain's serialised message
    return message_text(kwargs) if isinstance(kwargs, Mapping) else None


def role(message: Any) -> str | None:
    if not isinstance(message, Mapping):
        return None
    value = message.get("role") or message.get("type")
    if isinstance(value, str):
        return {"human": "user", "ai": "assistant"}.get(value, value)
    inner = message.get("message")
    return role(inner) if isinstance(inner, Mapping) else None


def as_messages(value: Any) -> list[Any] | None:
    value = maybe_json(value)
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):
        inner = value.get("messages")
        if isinstance(inner, list):
            return inner
        return [value]
    return None


def last_user_text(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if role(message) == "user":
            text = nonempty(message_text(message))
            if text:
                return text
    # no user message: the last non-system one (e.g. a bare prompt without roles)
    for message in reversed(messages):
        if role(message) not in SYSTEM_ROLES and role(message) not in ASSISTANT_ROLES:
            text = nonempty(message_text(message))
            if text:
                return text
    return None


def assistant_text(messages: list[Any]) -> str | None:
    texts = []
    for message in messages:
        if role(message) in (None, *ASSISTANT_ROLES):
            text = nonempty(message_text(message))
            if text:
                texts.append(text)
    return "\n".join(texts) if texts else None


def system_text(messages: list[Any]) -> str | None:
    texts = [
        t for t in (nonempty(message_text(m)) for m in messages if role(m) in SYSTEM_ROLES) if t
    ]
    return "\n".join(texts) if texts else None


def indexed(attributes: Mapping[str, Any], pattern: re.Pattern[str]) -> list[dict[str, Any]]:
    """Flattened lists (``prefix.N.field`` keys, e.g. ``llm.input_messages.0.message.role``)
    gathered back into dicts by index. ``pattern`` captures the index and the field name."""
    by_index: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = pattern.match(key)
        if match:
            by_index.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [by_index[i] for i in sorted(by_index)]


def captured_text(
    value: Any, keys: tuple[str, ...], want_input: bool, depth: int = 0
) -> str | None:
    """Text from a captured argument/return value: a str, a dict with a known key, a message
    list; otherwise the compact JSON of the value (still meaningful to a judge)."""
    if value is None or depth > 4:
        return None
    if isinstance(value, str):
        return nonempty(value)
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, Mapping):
        if isinstance(value.get("messages"), list):
            msgs = value["messages"]
            text = last_user_text(msgs) if want_input else assistant_text(msgs)
            if text:
                return text
        for key in keys:
            if key in value:
                text = captured_text(value[key], keys, want_input, depth + 1)
                if text:
                    return text
        if len(value) == 1:
            return captured_text(next(iter(value.values())), keys, want_input, depth + 1)
        # captured keyword arguments such as {"user_msg": "...", "history": [...], "k": 3}:
        # a lone text argument is the input
        texts = [v for v in value.values() if isinstance(v, str) and v.strip()]
        if len(texts) == 1:
            return texts[0]
    if isinstance(value, list):
        if value and all(isinstance(m, Mapping) and "role" in m for m in value):
            text = last_user_text(value) if want_input else assistant_text(value)
            if text:
                return text
        if len(value) == 1:
            return captured_text(value[0], keys, want_input, depth + 1)
    if not value:
        return None
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return None


def document_texts(value: Any, depth: int = 0) -> list[str]:
    """Texts of a document list in the common shapes: strings, ``{"content"|"text"|
    "page_content": ...}`` dicts, LangChain ``{"documents": [...]}`` and ``{"kwargs": ...}``."""
    value = maybe_json(value)
    if depth > 4:
        return []
    if isinstance(value, Mapping):
        for key in ("documents", "docs", "results", "output"):
            inner = value.get(key)
            if isinstance(inner, list):
                return document_texts(inner, depth + 1)
        value = [value]
    if not isinstance(value, list):
        return [value] if isinstance(value, str) and value.strip() else []
    texts = []
    for item in value:
        if isinstance(item, str):
            if item.strip():
                texts.append(item)
        elif isinstance(item, Mapping):
            text = _doc_text(item)
            if text:
                texts.append(text)
    return texts


def _doc_text(item: Mapping[str, Any]) -> str | None:
    for key in DOC_TEXT_KEYS:
        text = item.get(key)
        if isinstance(text, str) and text.strip():
            return text
    kwargs = item.get("kwargs")  # LangChain's serialised Document
    if isinstance(kwargs, Mapping):
        return _doc_text(kwargs)
    return None
