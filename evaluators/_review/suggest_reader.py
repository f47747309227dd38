"""A starting ``[[readers]]`` block for spans no dialect reads: ``spanjudge explain
--suggest-reader TRACE``.

For each kind of span (scope and name) in the trace that no dialect or declared reader reads,
or whose fields the plausibility gate refused, :func:`suggest_readers` looks at the attributes
and events it carries and guesses, by the shape of the values (never by a library's name):

* a list of chat messages (objects with a ``role``): the model call's ``input``, its last
  ``user`` message (``last_message:user``); the span is an ``llm``;
* a list of objects holding a text field, or the words ``hits``/``documents``/``results`` in the
  key: a ``retriever``'s ``context`` (``$.items[*].body``);
* text under a key or event named like an answer (``reply``, ``answer``, ``output``,
  ``completion``, ``response``, ``result``): the ``output``, with ``strip_markers`` when it
  holds field markers;
* text under a key named like a question (``ask``, ``question``, ``query``, ``prompt``,
  ``input``): the ``input``;
* a key named like a session (``thread``, ``session``, ``conversation``): the ``session``.

The block is TOML the worker reads unchanged; every guess is a line the user checks (the comment
above each reader says what the span carries). Example::

    print(suggest_readers(load_trace(store, trace_id)))
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._plan.coverage import is_evaluation
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.dialects.declared import FIELD_MARKERS, compile_path, walk
from spanjudge.evaluators._rebuild.dialects.message_text import is_message, maybe_json

__all__ = ["suggest_readers"]

_ANSWER = re.compile(r"(?i)(reply|answer|output|completion|response|result|said|txt|text)")
_QUESTION = re.compile(r"(?i)(ask|question|query|prompt|input|request)")
_SESSION = re.compile(r"(?i)(thread|session|conversation)")
_DOCS = re.compile(r"(?i)(hits|documents?|docs|results|passages|chunks|retriev)")
_KEY = re.compile(r"[A-Za-z_][\w-]*$")
_MAX_DEPTH = 4


def suggest_readers(spans: Iterable[SpanRecord], refused: Iterable[str] = ()) -> str:
    """The ``[[readers]]`` TOML for the spans of ``spans`` no dialect reads, and those whose
    span id is in ``refused`` (a field the gate refused); ``""`` when there are none."""
    refused_ids = set(refused)
    seen: set[tuple[str | None, str]] = set()
    blocks: list[str] = []
    for span in spans:
        if is_evaluation(span):
            continue
        view = read_span(span)
        if view.dialect is not None and span.span_id not in refused_ids:
            continue
        key = (span.scope_name, span.name)
        if key in seen:
            continue
        seen.add(key)
        block = _reader_block(span, len(blocks) + 1)
        if block:
            blocks.append(block)
    return "\n".join(blocks)


def _reader_block(span: SpanRecord, number: int) -> str | None:
    fields: dict[str, dict[str, Any]] = {}
    kind: str | None = None
    for name, value, place in _sources(span):
        found = _guess(name, value)
        if found is None:
            continue
        field_name, path, transforms, guessed_kind = found
        if field_name in fields:
            continue
        source: dict[str, Any] = dict(place)
        if path != "$":
            source["path"] = path
        if transforms:
            source["transforms"] = transforms
        fields[field_name] = source
        kind = kind or guessed_kind
    if not fields:
        return None
    kind = kind or ("agent" if "input" in fields and "output" in fields else "llm")
    if kind == "retriever":
        fields = {k: v for k, v in fields.items() if k in ("context", "input", "session")}
    name = re.sub(r"[^\w.-]+", "-", f"{span.scope_name or 'app'}-{span.name}").strip("-")
    lines = [
        f"# {span.name!r} (scope {span.scope_name or 'none'}): "
        f"{', '.join(sorted(span.attributes)[:8]) or 'no attributes'}; check each source",
        "[[readers]]",
        f"name = {_toml(name)}",
        f"kind = {_toml(kind)}",
        "[readers.match]",
    ]
    if span.scope_name:
        lines.append(f"scope = {_toml(span.scope_name)}")
    lines.append(f"span_name = {_toml(span.name)}")
    for field_name in ("input", "output", "context", "session"):
        chosen = fields.get(field_name)
        if chosen is None:
            continue
        lines.append(f"[readers.{field_name}]")
        lines.extend(f"{key} = {_toml(value)}" for key, value in chosen.items())
    return "\n".join(lines) + "\n"


def _sources(span: SpanRecord) -> list[tuple[str, Any, dict[str, str]]]:
    """(name, value, where) for each attribute, then each event's body or attributes."""
    found: list[tuple[str, Any, dict[str, str]]] = [
        (key, value, {"attribute": key}) for key, value in span.attributes.items()
    ]
    for event in span.events:
        a = event.attributes
        value: Any = a["body"] if "body" in a else dict(a)
        found.append((event.name, value, {"event": event.name}))
    return found


def _guess(name: str, value: Any) -> tuple[str, str, list[str], str | None] | None:
    """(field, path, transforms, kind) for one source, or ``None``."""
    parsed = maybe_json(value)
    messages = _find(parsed, "$", _is_messages)
    if messages is not None:
        return "input", messages, ["last_message:user"], "llm"
    docs = _documents_path(parsed)
    if docs is not None and (_DOCS.search(name) or docs.endswith("]")):
        return "context", docs, [], "retriever"
    if isinstance(parsed, str):
        if _SESSION.search(name) and len(parsed) < 200:
            return "session", "$", [], None
        if _ANSWER.search(name):
            return "output", "$", _strip(parsed), None
        if _QUESTION.search(name):
            return "input", "$", [], None
        return None
    text_path = _find(
        parsed, "$", lambda v, p: isinstance(v, str) and _ANSWER.search(p) and _prose(v)
    )
    if text_path is not None and (_ANSWER.search(name) or _ANSWER.search(text_path)):
        text = _at(parsed, text_path)
        return "output", text_path, _strip(text), None
    return None


def _is_messages(value: Any, path: str) -> bool:
    return isinstance(value, list) and bool(value) and all(is_message(m) for m in value)


def _documents_path(value: Any) -> str | None:
    """``$.items[*].body``: a list of objects with a text field, found under ``value``."""

    def is_docs(v: Any, path: str) -> bool:
        return (
            isinstance(v, list)
            and bool(v)
            and all(isinstance(i, Mapping) for i in v)
            and _text_key(v[0]) is not None
            and not any(is_message(i) for i in v)
        )

    found = _find(value, "$", is_docs)
    if found is None:
        return None
    key = _text_key(_at(value, found)[0])
    return f"{found}[*]{_step(str(key))}"


def _text_key(item: Mapping[str, Any]) -> str | None:
    texts = [(len(v), k) for k, v in item.items() if isinstance(v, str) and _prose(v)]
    return max(texts)[1] if texts else None


def _find(value: Any, path: str, test: Any, depth: int = 0) -> str | None:
    if test(value, path):
        return path
    if depth >= _MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = _find(maybe_json(item), path + _step(str(key)), test, depth + 1)
            if found is not None:
                return found
    return None


def _at(value: Any, path: str) -> Any:
    return walk(value, compile_path(path))


def _step(key: str) -> str:
    return f".{key}" if _KEY.match(key) else f"[{json.dumps(key)}]"


def _prose(text: str) -> bool:
    return len(text.split()) >= 3


def _strip(text: Any) -> list[str]:
    return ["strip_markers"] if isinstance(text, str) and FIELD_MARKERS.search(text) else []


def _toml(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str) and '"' in value and "'" not in value:
        return f"'{value}'"  # a literal string: a path with ["key"] reads as written
    return json.dumps(value)
