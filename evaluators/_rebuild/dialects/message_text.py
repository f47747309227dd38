"""Text out of the values instrumentations write: messages in every common shape, captured
arguments, document lists, and JSON strings read within limits.

Message shapes read (:func:`message_text`): a plain string; a JSON string of any of these; an
OpenAI message (``content`` a string or a list of parts); a semconv message (``parts``); an
Anthropic or Bedrock message (``content`` a list of ``{"type": "text", "text": ...}`` or bare
``{"text": ...}`` blocks); a bare list of such blocks (Strands' ``gen_ai.choice`` ``message``);
a LlamaIndex ``ChatMessage`` (``blocks``); a choice (``{"message": {...}}``); a LangChain
serialised message (``kwargs``). Text parts only: images, tool calls and reasoning are not
conversation text.

Python reprs and object placeholders (``ChatMessage(role=<MessageRole.USER: 'user'>, ...)``,
``<NodeWithScore(node=TextNode(...))>``, ``<foo.Bar object at 0x7f...>``) are recognised by
:func:`is_placeholder` and never become text: a library that stringifies its objects told us
nothing a judge can read.

Pure functions; nothing here raises on odd values (wrong types, bad JSON, deep nesting).

Example::

    message_text('[{"text": "Yes."}]')  # 'Yes.'
    is_placeholder("ChatMessage(role=<MessageRole.USER: 'user'>, blocks=[...])")  # True
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
_TEXT_BLOCK_KEYS = ("content", "text")
DOC_TEXT_KEYS = ("content", "text", "page_content", "document", "pageContent", "memory")
# ``Name(field=`` or ``<Name(`` / ``[Name(`` at the start: a dataclass / pydantic / attrs repr;
# ``<pkg.Name object at 0x...>``, ``<function f at 0x...>``, enum reprs ``<Role.USER: 'user'>``,
# a Python dict's repr ``{'content': None, 'role': 'assistant'...}`` (JSON has double quotes).
_REPR = re.compile(
    r"^[\s\[<(]*(?:[A-Za-z_][\w.]*\((?:[A-Za-z_]\w*=|\))"
    r"|[A-Za-z_][\w.]* object(?: at 0x[0-9a-fA-F]+)?>"
    r"|(?:function|bound method|built-in function|coroutine object|generator object) [^\n]* at 0x"
    r"|[A-Z]\w*\.[A-Z_]\w*: [^>\n]{0,80}>"
    r"|\{'[\w .-]{1,40}': (?:None|True|False|'|\[|\{|\d))"
)
INPUT_KEYS = (
    "input",
    "query",
    "question",
    "task",
    "message",
    "prompt",
    "user_input",
    "user_msg",
    "text",
    "content",
)
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
    """``text`` when it is a string with something in it that is not a Python repr."""
    if isinstance(text, str) and text.strip() and not is_placeholder(text):
        return text
    return None


def is_placeholder(text: str) -> bool:
    """True for a Python repr or object placeholder standing where text belongs (see the
    module docstring); prose and JSON are never placeholders."""
    head = text[:200]
    # every shape the pattern knows holds one of these; prose mostly holds none (the regex
    # costs more than these scans: planning reads every span's text)
    if "(" not in head and "<" not in head and "{'" not in head:
        return False
    return bool(_REPR.match(head))


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
        return nonempty(part)
    if isinstance(part, Mapping):
        kind = part.get("type", part.get("block_type"))
        if kind not in _TEXT_PART_TYPES:
            return None  # images, tool calls, reasoning: not conversation text
        for key in _TEXT_BLOCK_KEYS:
            value = part.get(key)
            if isinstance(value, str):
                return nonempty(value)
    return None


def _parts_text(parts: list[Any]) -> str | None:
    texts = [t for t in (part_text(p) for p in parts) if t]
    return "\n".join(texts) if texts else None


def message_text(message: Any, depth: int = 0) -> str | None:
    """Text of one message in any of the shapes the module docstring lists; ``None`` when it
    holds no text (or only a Python repr)."""
    if depth > 4:
        return None
    if isinstance(message, str):
        parsed = maybe_json(message)
        if parsed is not message and not isinstance(parsed, str):
            return message_text(parsed, depth + 1)  # a JSON string of blocks or a message
        return nonempty(parsed)
    if isinstance(message, list):  # a bare list of content blocks
        return _parts_text(message)
    if not isinstance(message, Mapping):
        return None
    inner = message.get("message")
    if isinstance(inner, Mapping | list):  # {"index": 0, "message": {...}} choice
        return message_text(inner, depth + 1)
    for key in ("parts", "content", "blocks"):
        value = message.get(key)
        if isinstance(value, str) and key == "content":
            return nonempty(value)
        if isinstance(value, list):
            return _parts_text(value)
    text = message.get("text")
    if isinstance(text, str):
        return nonempty(text)
    # LangChain's serialised message: dumpd's "kwargs", messages_to_dict's "data"
    kwargs = message.get("kwargs", message.get("data"))
    return message_text(kwargs, depth + 1) if isinstance(kwargs, Mapping) else None


def is_message(value: Any) -> bool:
    """A mapping shaped like one chat message (a role and some content field)."""
    return isinstance(value, Mapping) and (
        "role" in value and any(k in value for k in ("content", "parts", "blocks", "text"))
    )


# keys of a captured mapping whose lone string value is never the text (a role, an id, a type)
_NOT_TEXT_KEYS = frozenset(
    {"role", "type", "block_type", "id", "id_", "name", "model", "finish_reason", "object"}
)


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
        if is_message(value):
            return message_text(value)
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
        if not want_input:
            # a result object ({"exit_reason": "text", "last_message": {...}}): the answer is
            # its message, never a status beside it
            said = _message_field_text(value)
            if said:
                return said
        # captured keyword arguments such as {"user_msg": "...", "history": [...], "k": 3}:
        # a lone text argument is the input
        texts = [v for k, v in value.items() if k not in _NOT_TEXT_KEYS and nonempty(v)]
        if len(texts) == 1:
            return str(texts[0])
    if isinstance(value, list):
        if value and all(isinstance(m, Mapping) and "role" in m for m in value):
            text = last_user_text(value) if want_input else assistant_text(value)
            if text:
                return text
        if len(value) == 1:
            return captured_text(value[0], keys, want_input, depth + 1)
    if not value or _only_placeholders(value):
        return None
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return None


def _message_field_text(value: Mapping[str, Any]) -> str | None:
    """The text of the one message-like field of an object (a message, or a list of messages:
    its last assistant one), else ``None`` (none, or several that disagree)."""
    texts: list[str] = []
    for item in value.values():
        if isinstance(item, str):
            item = maybe_json(item)
        if is_message(item) and role(item) not in SYSTEM_ROLES and role(item) != "user":
            found = message_text(item)
        elif isinstance(item, list) and item and all(is_message(m) for m in item):
            found = assistant_text([m for m in item if role(m) in ASSISTANT_ROLES][-1:])
        else:
            continue
        if found:
            texts.append(found)
    return texts[0] if len(set(texts)) == 1 else None


def _only_placeholders(value: Any, depth: int = 0) -> bool:
    """True when every string inside ``value`` is a Python repr (and there is one)."""
    leaves: list[str] = []
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack and len(leaves) < 50:
        item, level = stack.pop()
        if isinstance(item, str):
            leaves.append(item)
        elif level < 6 and isinstance(item, Mapping):
            stack.extend((v, level + 1) for v in item.values())
        elif level < 6 and isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    texts = [leaf for leaf in leaves if leaf.strip()]
    return bool(texts) and all(is_placeholder(leaf) for leaf in texts)


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
        return [value] if nonempty(value) else []
    texts = []
    for item in value:
        if isinstance(item, str):
            if nonempty(item):
                texts.extend(_unwrapped(item, depth))
        elif isinstance(item, Mapping):
            text = _doc_text(item)
            if text:
                texts.extend(_unwrapped(text, depth))
    return texts


def _unwrapped(text: str, depth: int) -> list[str]:
    """A text that is itself the JSON of documents (a tool result block holding the
    retriever's JSON, a double-encoded NodeWithScore) read as those documents."""
    parsed = maybe_json(text)
    if parsed is text or isinstance(parsed, str) or depth >= 4:
        return [text]
    return document_texts(parsed, depth + 1) or [text]


def _doc_text(item: Mapping[str, Any], depth: int = 0) -> str | None:
    for key in DOC_TEXT_KEYS:
        text = nonempty(item.get(key))
        if text:
            return text
    # LangChain's serialised Document (kwargs), LlamaIndex's NodeWithScore (node)
    for key in ("kwargs", "node"):
        inner = item.get(key)
        if isinstance(inner, Mapping) and depth < 3:
            return _doc_text(inner, depth + 1)
    return None


def looks_like_document(item: Any) -> bool:
    """A mapping shaped like one retrieved document or memory record: a text field beside an
    id, a score or metadata (what retrievers, vector stores and memory stores return)."""
    if not isinstance(item, Mapping) or _doc_text(item) is None:
        return False
    inner = item.get("node")
    keys = set(item) | (set(inner) if isinstance(inner, Mapping) else set())
    return bool(keys & _DOC_MARKERS)


_DOC_MARKERS = frozenset(
    {"id", "id_", "doc_id", "node_id", "score", "metadata", "meta", "source", "distance", "node"}
)
