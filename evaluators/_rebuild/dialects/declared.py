"""Declared readers: a team's own reading of spans no dialect knows (or reads wrong), as data.

A :class:`Reader` says which spans it applies to (``match``: the instrumentation scope, the span
name, attributes present or equal), what they are (``kind``: ``llm``, ``retriever``, ``tool``,
``agent``) and where each field comes from (:class:`FieldSource`: a span attribute or an event,
or a log record joined to the span as one, with a JSON path into it and a closed list of
transforms). The worker takes them from ``[[readers]]`` tables, ``spanjudge.monitor()`` from
``readers=[...]``; both go through :func:`install`.

Declared readers go before the built-in dialects: a reader's field wins, what it leaves unset
the span's dialect (if any) still fills, and the general rules and the plausibility gate apply
to what it produced as to any dialect's reading. Every key is checked when the reader is made
(one line naming the reader and the key); a path that never matches in an hour of traffic is
logged once (:meth:`FieldSource.missed`).

Paths: ``$`` (the whole value), ``.key`` or ``["key.with.dots"]``, ``[n]`` (``[-1]`` the last),
``[*]`` (every item). A string on the way is parsed as JSON when a step goes into it.

Transforms, applied in order after the path:

* ``parse_json``: a JSON string parsed;
* ``last_message`` / ``last_message:ROLE``: the last message (of that role) of a message list;
* ``content_text``: the text of a message or of its content blocks;
* ``strip_markers``: field markers (``[[ ## answer ## ]]``, ``<answer>``) taken out of the text;
* ``regex:PATTERN``: the pattern's first group (or the whole match) in the text; nothing when it
  does not match;
* ``join_documents``: a list of documents (strings or ``{"text": ...}`` objects) as one text,
  one a line.

Example::

    reader = Reader(
        name="acme",
        kind="llm",
        match={"scope": "acme.llm*"},
        input={"attribute": "acme.request", "path": "$.convo", "transforms": ["last_message:user"]},
        output={"event": "acme.reply", "path": "$.text"},
    )
    install([reader])
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from spanjudge._core.checked_model import message_of
from spanjudge._core.span_record import SpanRecord
from spanjudge.errors import ConfigError
from spanjudge.evaluators._rebuild.dialects.message_text import (
    as_messages,
    assistant_text,
    document_texts,
    last_user_text,
    maybe_json,
    message_text,
    role,
)
from spanjudge.evaluators._rebuild.dialects.view import Document, GenAIView, ToolCallView

__all__ = ["FieldSource", "Reader", "ReaderMatch", "install", "installed", "reader_for"]

logger = logging.getLogger("spanjudge.readers")

ReaderKind = Literal["llm", "retriever", "tool", "agent"]
TEXT_FIELDS = ("input", "output", "session", "tool_name", "error")
VALUE_FIELDS = ("arguments", "result")
FIELDS = (*TEXT_FIELDS, "context", *VALUE_FIELDS)
TRANSFORMS = (
    "parse_json",
    "last_message",
    "content_text",
    "strip_markers",
    "regex",
    "join_documents",
)
MISS_WINDOW_SECONDS = 3600.0

_STEP = re.compile(r"""\.([A-Za-z_][\w-]*)|\[(-?\d+)\]|\[\*\]|\[(?:"([^"]+)"|'([^']+)')\]""")
FIELD_MARKERS = re.compile(r"\[\[ ## \w+ ## \]\]|</?[a-z][a-z_]{0,30}>")
"""What the ``strip_markers`` transform takes out (``explain --suggest-reader`` proposes it
where this matches)."""
_EVERY = object()
Step = str | int | object


def error_lines_of(errors: list[Any]) -> list[str]:
    """``key: what is wrong`` for pydantic error dicts (as :func:`error_lines` says them)."""
    return [
        f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: "
        + ("unknown key" if e["type"] == "extra_forbidden" else message_of(e))
        for e in errors
    ]


def compile_path(path: str) -> tuple[Step, ...]:
    """``$.a[0]["b.c"][*]`` -> ``("a", 0, "b.c", EVERY)``; ValueError naming what is wrong."""
    if not path.startswith("$"):
        raise ValueError(f"a JSON path starts with $, got {path!r}")
    steps: list[Step] = []
    at = 1
    while at < len(path):
        found = _STEP.match(path, at)
        if found is None:
            raise ValueError(
                f'bad JSON path {path!r} at character {at + 1} (use .key, ["key"], [n], [*])'
            )
        key, index, dq, sq = found.groups()
        if key is not None or dq is not None or sq is not None:
            steps.append(key or dq or sq)
        elif index is not None:
            steps.append(int(index))
        else:
            steps.append(_EVERY)
        at = found.end()
    return tuple(steps)


def walk(value: Any, steps: Sequence[Step]) -> Any:
    for n, step in enumerate(steps):
        value = maybe_json(value)
        if step is _EVERY:
            if not isinstance(value, list):
                return None
            found = [walk(item, steps[n + 1 :]) for item in value]
            return [f for f in found if f is not None] or None
        if isinstance(step, int):
            if not isinstance(value, list) or not -len(value) <= step < len(value):
                return None
            value = value[step]
        elif isinstance(value, Mapping):
            value = value.get(step)
        else:
            return None
        if value is None:
            return None
    return value


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    return message_text(value)


def _last_message(role_name: str | None) -> Callable[[Any], Any]:
    def last(value: Any) -> Any:
        for message in reversed(as_messages(value) or []):
            if role_name is None or role(message) == role_name:
                return message
        return None

    return last


def _content_text(value: Any) -> Any:
    return message_text(maybe_json(value))


def _strip_markers(value: Any) -> Any:
    text = _text(value)
    return FIELD_MARKERS.sub("", text).strip() or None if text is not None else None


def _regex(pattern: re.Pattern[str]) -> Callable[[Any], Any]:
    def search(value: Any) -> Any:
        text = _text(value)
        found = pattern.search(text) if text is not None else None
        if found is None:
            return None
        return (found.group(1) if pattern.groups else found.group(0)).strip() or None

    return search


def _join_documents(value: Any) -> Any:
    texts = document_texts(maybe_json(value))
    return "\n".join(texts) if texts else None


def compile_transform(spec: str) -> Callable[[Any], Any]:
    name, colon, argument = spec.partition(":")
    if name not in TRANSFORMS:
        raise ValueError(f"unknown transform {name!r} (known: {', '.join(TRANSFORMS)})")
    if name == "last_message":
        return _last_message(argument.strip() or None)
    if name == "regex":
        if not argument:
            raise ValueError("regex needs a pattern: 'regex:PATTERN'")
        try:
            return _regex(re.compile(argument))
        except re.error as exc:
            raise ValueError(f"regex {argument!r} does not compile: {exc}") from None
    if colon:
        raise ValueError(f"the transform {name!r} takes no argument, got {spec!r}")
    plain: dict[str, Callable[[Any], Any]] = {
        "parse_json": maybe_json,
        "content_text": _content_text,
        "strip_markers": _strip_markers,
        "join_documents": _join_documents,
    }
    return plain[name]


class _Checked(BaseModel):
    """Made in Python, a bad value is a :class:`ConfigError` (``FieldSource.path: bad JSON
    path ...``); inside a :class:`Reader` the reader names the key (``input.path: ...``)."""

    if not TYPE_CHECKING:  # type checkers keep the keyword signature pydantic derives

        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as exc:
                raise _nested_error(type(self).__name__, exc) from None


def _nested_error(model: str, exc: ValidationError) -> ConfigError:
    keyed = [
        (
            ".".join(str(p) for p in e["loc"]),
            "unknown key" if e["type"] == "extra_forbidden" else message_of(e),
        )
        for e in exc.errors()
    ]
    error = ConfigError("; ".join(f"{model}.{k}: {m}" if k else f"{model}: {m}" for k, m in keyed))
    error.keyed = keyed  # type: ignore[attr-defined]
    return error


class FieldSource(_Checked):
    """Where one field comes from: ``attribute`` (a span attribute) or ``event`` (the last span
    event of that name, a joined log record's ``body`` when it has one), then ``path`` and
    ``transforms`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attribute: str | None = Field(default=None, min_length=1, description="A span attribute.")
    event: str | None = Field(
        default=None, min_length=1, description="An event (or log record) name."
    )
    path: str = Field(default="$", description="A JSON path into the value.")
    transforms: tuple[str, ...] = Field(default=(), description="Applied in order.")

    _steps: tuple[Step, ...] = PrivateAttr(default=())
    _apply: tuple[Callable[[Any], Any], ...] = PrivateAttr(default=())
    _last_hit: float = PrivateAttr(default=0.0)
    _warned: bool = PrivateAttr(default=False)

    @field_validator("path")
    @classmethod
    def _path_compiles(cls, value: str) -> str:
        compile_path(value)
        return value

    @field_validator("transforms")
    @classmethod
    def _transforms_known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for spec in value:
            compile_transform(spec)
        return value

    @model_validator(mode="after")
    def _one_place(self) -> FieldSource:
        if (self.attribute is None) == (self.event is None):
            raise ValueError("give exactly one of attribute and event")
        self._steps = compile_path(self.path)
        self._apply = tuple(compile_transform(t) for t in self.transforms)
        self._last_hit = time.monotonic()
        return self

    @property
    def where(self) -> str:
        place = f"attribute {self.attribute}" if self.attribute else f"event {self.event}"
        return place if self.path == "$" else f"{place} {self.path}"

    def raw(self, span: SpanRecord) -> Any:
        """The value at the source, before the path (``None``: the span has none)."""
        if self.attribute is not None:
            return span.attributes.get(self.attribute)
        for event in reversed(span.events):
            if event.name == self.event:
                a = event.attributes
                return a["body"] if "body" in a else dict(a)
        return None

    def value(self, span: SpanRecord) -> Any:
        """The field's value on ``span``, or ``None`` when the source, the path or a transform
        finds nothing."""
        value = self.raw(span)
        if value is None:
            return None
        value = walk(value, self._steps)
        for apply in self._apply:
            if value is None:
                break
            value = apply(value)
        if value is not None:
            self._last_hit = time.monotonic()
        return value

    def missed(self, now: float, where: str) -> None:
        """Log once when the source was present on matched spans but the path or a transform
        found nothing for an hour."""
        if not self._warned and now - self._last_hit >= MISS_WINDOW_SECONDS:
            self._warned = True
            logger.warning(
                "%s: %s has matched nothing for an hour of traffic (check the path and "
                "transforms against a span: spanjudge explain --suggest-reader TRACE)",
                where,
                self.where,
            )


class ReaderMatch(_Checked):
    """Which spans a reader applies to: every condition given must hold. ``scope`` and
    ``span_name`` are globs (``acme.*``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scope: str | None = Field(default=None, min_length=1, description="Instrumentation scope.")
    span_name: str | None = Field(default=None, min_length=1, description="Span name glob.")
    attributes: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Attributes that must have these values."
    )
    attributes_exist: tuple[str, ...] = Field(
        default=(), description="Attributes that must be present."
    )

    _name: re.Pattern[str] | None = PrivateAttr(default=None)
    _prefix: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _something(self) -> ReaderMatch:
        if not (self.scope or self.span_name or self.attributes or self.attributes_exist):
            raise ValueError(
                "give at least one of scope, span_name, attributes, attributes_exist "
                "(a reader for every span would misread them)"
            )
        if self.span_name is not None:
            self._name = re.compile(fnmatch.translate(self.span_name))
        head = (self.scope or "")[:-1]
        if (self.scope or "").endswith("*") and not any(c in head for c in "*?["):
            self._prefix = head  # "openlit*": a prefix test, no pattern per span
        return self

    def scope_matches(self, scope: str) -> bool:
        if self.scope is None:
            return True
        if self._prefix is not None:
            return scope.startswith(self._prefix)
        return scope == self.scope or fnmatch.fnmatchcase(scope, self.scope)

    def rest_matcher(self) -> Callable[[SpanRecord], bool]:
        """The conditions past the scope, as one plain function (no model attribute reads
        per span)."""
        name = self._name
        present = self.attributes_exist
        equal = tuple(self.attributes.items())

        def rest(span: SpanRecord) -> bool:
            if name is not None and not name.match(span.name):
                return False
            a = span.attributes
            return all(k in a for k in present) and all(a.get(k) == v for k, v in equal)

        return rest

    def matches(self, span: SpanRecord) -> bool:
        return self.scope_matches(span.scope_name or "") and self.rest_matcher()(span)


class Reader(BaseModel):
    """One declared reader (see the module docstring): ``[[readers]]`` in the worker's file,
    ``spanjudge.monitor(readers=[...])`` in Python."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    if not TYPE_CHECKING:  # type checkers keep the keyword signature pydantic derives

        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as exc:  # one line: "reader 'acme': input.path: bad ..."
                raise ConfigError("; ".join(e["msg"] for e in exc.errors())) from None

    name: str = Field(min_length=1, description="Named in logs and in explain.")
    kind: ReaderKind = Field(description="What the matched spans are: llm, retriever, tool, agent.")
    match: ReaderMatch = Field(description="Which spans (scope, span_name, attributes...).")
    input: FieldSource | None = Field(default=None, description="The question / the input.")
    output: FieldSource | None = Field(default=None, description="The answer / the output.")
    context: FieldSource | None = Field(
        default=None, description="Retrieved documents (a list, or one text)."
    )
    session: FieldSource | None = Field(default=None, description="The conversation id.")
    tool_name: FieldSource | None = Field(default=None, description="A tool span's tool.")
    arguments: FieldSource | None = Field(default=None, description="A tool call's arguments.")
    result: FieldSource | None = Field(default=None, description="A tool call's result.")
    error: FieldSource | None = Field(default=None, description="A step's error.")

    @model_validator(mode="wrap")
    @classmethod
    def _named(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # every line names the reader, so a file with several says which one to fix
        try:
            return handler(data)
        except ValidationError as exc:
            name = data.get("name") if isinstance(data, Mapping) else None
            who = f"reader {name!r}" if isinstance(name, str) and name else "reader"
            parts: list[str] = []
            for err in exc.errors():
                raised = err.get("ctx", {}).get("error")
                keyed = getattr(raised, "keyed", None)
                where = ".".join(str(p) for p in err["loc"])
                if isinstance(raised, ConfigError) and keyed is None:
                    # pydantic validates a nested reader through __init__: named there already
                    raise PydanticCustomError("reader", "{line}", {"line": str(raised)}) from None
                if keyed is not None:  # a FieldSource or ReaderMatch, made by its __init__
                    parts += [f"{where}.{k}: {m}" if k else f"{where}: {m}" for k, m in keyed]
                else:
                    parts += error_lines_of([err])
            what = "; ".join(parts)
            raise PydanticCustomError(
                "reader", "{who}: {what}", {"who": who, "what": what}
            ) from None

    _dialect: ModuleType | None = PrivateAttr(default=None)
    _dialect_name: str | None = PrivateAttr(default=None)

    @property
    def dialect_name(self) -> str:
        """``reader:<name>`` (a shipped reader: its name, as a built-in dialect's)."""
        return self._dialect_name or f"reader:{self.name}"

    @property
    def as_dialect(self) -> ModuleType:
        """The reader in a dialect's shape (``NAME``, ``matches``, ``kind_of``), for what asks
        which dialect reads a span (the planner's coverage counts)."""
        if self._dialect is None:
            module = ModuleType(self.dialect_name)
            kind = self.kind
            module.NAME = self.dialect_name  # type: ignore[attr-defined]
            module.matches = self.match.matches  # type: ignore[attr-defined]
            module.kind_of = lambda span: kind  # type: ignore[attr-defined]
            module.read = lambda view: apply(self, view)  # type: ignore[attr-defined]
            self._dialect = module
        return self._dialect

    @property
    def sources(self) -> list[tuple[str, FieldSource]]:
        return [(f, s) for f in FIELDS if (s := getattr(self, f)) is not None]


class _Installed:
    """The readers in force, in order, with the candidates of each scope name worked out once
    (a handful of scopes carry every span): a span of a scope no reader names costs one dict
    lookup, on the planner's path and the receiver's."""

    _MAX_SCOPES = 4096

    def __init__(self, readers: Sequence[Reader]) -> None:
        self.readers = tuple(readers)
        self._by_scope: dict[str, tuple[tuple[Reader, Callable[[SpanRecord], bool]], ...]] = {}

    def first(self, span: SpanRecord) -> Reader | None:
        scope = span.scope_name or ""
        candidates = self._by_scope.get(scope)
        if candidates is None:
            candidates = tuple(
                (r, r.match.rest_matcher()) for r in self.readers if r.match.scope_matches(scope)
            )
            if len(self._by_scope) < self._MAX_SCOPES:
                self._by_scope[scope] = candidates
        for reader, rest in candidates:
            if rest(span):
                return reader
        return None


_NONE = _Installed(())
_current = _NONE
_shipped = _NONE
_LOCK = threading.Lock()
_ON_CHANGE: list[Callable[[], None]] = []


def on_change(callback: Callable[[], None]) -> None:
    """Call ``callback`` whenever the readers change (the dialects forget cached views)."""
    _ON_CHANGE.append(callback)


def install(readers: Sequence[Reader | Mapping[str, Any]] | None) -> tuple[Reader, ...]:
    """Put ``readers`` in force for this process (replacing any before; ``None`` or ``[]``
    removes them). Mappings are validated as :class:`Reader` (a ConfigError naming the reader
    and the key); two readers of one name are a ConfigError too."""
    global _current
    made = [r if isinstance(r, Reader) else Reader(**r) for r in readers or ()]
    names = [r.name for r in made]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"readers: the name {repeated[0]!r} is used twice (names key the logs)")
    taken = sorted(set(names) & {r.name for r in _shipped.readers})
    if taken:
        raise ConfigError(f"readers: the name {taken[0]!r} is a shipped reader's: pick another")
    with _LOCK:
        _current = _Installed(made) if made else _NONE
        for callback in _ON_CHANGE:
            callback()  # the span views cached: the old readers' readings
    return tuple(made)


def installed() -> tuple[Reader, ...]:
    return _current.readers


def ship(readers: Sequence[Reader]) -> None:
    """The readers shipped with the package (:mod:`.shipped`): read after the installed ones,
    before the built-in dialects; their dialect name is their own name."""
    global _shipped
    for reader in readers:
        reader._dialect_name = reader.name
    _shipped = _Installed(readers)


def reader_for(span: SpanRecord) -> Reader | None:
    """The first reader that matches ``span``: the installed ones in order, then the shipped
    ones; ``None`` when none does."""
    found = _current.first(span) if _current.readers else None
    return found if found is not None or not _shipped.readers else _shipped.first(span)


def field_values(reader: Reader, span: SpanRecord) -> dict[str, Any]:
    """Field -> value for every field ``reader`` finds on ``span``; a source that is present
    but finds nothing counts toward its once-an-hour warning."""
    found: dict[str, Any] = {}
    now = time.monotonic()
    for field_name, source in reader.sources:
        value = source.value(span)
        if field_name in TEXT_FIELDS:
            value = _text_of(field_name, value)
        elif field_name == "context":
            value = _documents(value)
        if value is not None:
            found[field_name] = value
        else:
            source.missed(now, f"reader {reader.name!r} {field_name}")
    return found


def apply(reader: Reader, view: GenAIView) -> None:
    """Put what ``reader`` finds on the view's span into ``view`` (read by its dialect, if
    any, before): the reader's fields win, each with its source in ``view.found``."""
    values = field_values(reader, view.span)
    view.kind = reader.kind
    how = f"reader {reader.name!r}"
    for field_name, attr in (("input", "input_text"), ("output", "output_text")):
        if field_name in values:
            setattr(view, attr, values[field_name])
            key = "actual_output" if field_name == "output" else field_name
            view.notes.pop(key, None)
            view.found[key] = f"{how}: {getattr(reader, field_name).where}"
    if "context" in values:
        view.documents = [Document(t) for t in values["context"]]
        view.notes.pop("retrieval_context", None)
        view.found["retrieval_context"] = f"{how}: {reader.context.where}"  # type: ignore[union-attr]
    if "session" in values:
        view.conversation_id = values["session"]
    if reader.kind == "tool" and any(k in values for k in ("tool_name", *VALUE_FIELDS, "error")):
        tool = view.tool or ToolCallView(name=values.get("tool_name") or view.span.name)
        if "tool_name" in values:
            tool.name = values["tool_name"]
        for key in VALUE_FIELDS:
            if key in values:
                setattr(tool, key, maybe_json(values[key]))
        view.tool = tool
    if "error" in values:
        view.error = values["error"]
    if "input" in values or "output" in values:
        view.capture_off = None  # the reader found the content: nothing to blame


def _text_of(field_name: str, value: Any) -> str | None:
    messages = value if isinstance(value, list) else None
    if messages and field_name == "input":
        return last_user_text(messages)
    if messages and field_name == "output":
        return assistant_text(messages)
    return _text(value)


def _documents(value: Any) -> list[str] | None:
    if isinstance(value, str):
        parsed = maybe_json(value)
        if parsed is value:
            return [value] if value.strip() else None
        value = parsed
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()] or None
    return document_texts(value) or None


def dumps(value: Any) -> str:
    """A value as one line of JSON (for suggestions and notes)."""
    return json.dumps(value, ensure_ascii=False, default=str)
