"""One canonical reading of a span, many dialects: :func:`read_span` turns a stored span (with
the GenAI content events joined to it) into a :class:`GenAIView`.

Precedence, first match wins (more specific markers before the generic semconv):

0. a **declared reader** (:mod:`.declared`: ``[[readers]]`` in the worker's file,
   ``monitor(readers=...)``) that matches the span: its fields win, and the built-in dialect
   below that matches (if any) fills what the reader leaves unset; ``dialect`` is
   ``reader:<name>``; then the **shipped readers** (:mod:`.shipped`, the same mechanism as
   data: ``openlit`` retrieval spans, ``mlflow-chat``/``-retriever``/``-agent`` for MLflow
   tracing's own attributes, ``langfuse-generation``/``-retriever``/``-agent``/``-tool`` for the
   Langfuse SDK's observations);
1. ``spanjudge``: our own ``@observe`` spans (``spanjudge.kind``, scope ``spanjudge``);
2. ``openinference``: ``openinference.span.kind``;
3. ``vercel-ai``: ``ai.operationId``;
4. ``pydantic-ai``: scope ``pydantic-ai``/``logfire`` or its ``pydantic_ai.*``/``final_result``
   attributes;
5. ``litellm``: scope ``litellm`` (before OpenLLMetry: it also writes ``llm.request.type``);
6. ``openllmetry``: ``traceloop.*`` attributes or ``llm.request.type``;
7. ``genai-semconv``: any span with ``gen_ai.operation.name`` (OpenLIT's spans other than
   retrieval too);
8. ``generic``: no name of its own; a model call recognised by chat messages in an input-like
   attribute and an assistant message in an output-like one (:mod:`.fallback`).

Each dialect reads its own names first, then the GenAI semconv fills what is still empty (most
libraries write some semconv attributes beside their own). After the dialect, the rules of
:mod:`.common_rules` apply to every view (Python reprs refused, the shapes of
:mod:`.text_shapes` read where a general rule can, a tool named after its callable named after
the tool, a capture setting blamed only on evidence and named by the instrumentation that wrote
the span (:mod:`.capture_switches`), each field's source recorded). A span no dialect recognises has
``dialect is None`` and ``kind is None``: not a GenAI step (an HTTP call, a database query); the
planner counts such spans and logs their shape once, so nothing is dropped silently.

Example::

    view = read_span(span)
    if view.kind == "llm":
        print(view.dialect, view.input_text, view.output_text)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import (
    common_rules,
    declared,
    fallback,
    litellm,
    openinference,
    openllmetry,
    pydantic_ai,
    semconv,
    shipped,
    spanjudge,
    vercel_ai,
)
from spanjudge.evaluators._rebuild.dialects.view import GenAIView, ViewKind

DIALECTS: tuple[ModuleType, ...] = (
    spanjudge,
    openinference,
    vercel_ai,
    pydantic_ai,
    litellm,
    openllmetry,
    semconv,
    fallback,
)

# Views are pure functions of a span: keep the most recent ones, keyed by the span object, so
# planning and rebuilding one trace read each span once. Bounded in entries (a view holds its
# span, and a span may carry a megabyte of content); the oldest go first. Receiver threads
# (enrich mode) and the tick thread read at once: writes take the lock.
_CACHE: dict[int, tuple[SpanRecord, int, GenAIView]] = {}
_CACHE_SIZE = 2048
_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every view read (the declared readers changed)."""
    with _CACHE_LOCK:
        _CACHE.clear()


declared.on_change(clear_cache)
declared.ship(shipped.READERS)


def dialect_of(span: SpanRecord) -> ModuleType | None:
    """The dialect that reads ``span`` (see the precedence above), or ``None``; a declared
    reader that matches comes first (as a dialect named ``reader:<name>``)."""
    reader = declared.reader_for(span)
    if reader is not None:
        return reader.as_dialect
    return builtin_dialect_of(span)


def builtin_dialect_of(span: SpanRecord) -> ModuleType | None:
    """The built-in dialect that reads ``span``, declared readers left out."""
    for dialect in DIALECTS:
        if dialect.matches(span):
            return dialect
    return None


def kind_of(span: SpanRecord) -> ViewKind | None:
    """``read_span(span).kind`` without reading the content: the receiver decides which spans
    enrich mode holds with this, on its hot path. Never raises."""
    hit = _cached(span)
    if hit is not None:
        return hit.kind
    dialect = dialect_of(span)
    if dialect is None:
        return None
    try:
        kind: ViewKind | None = dialect.kind_of(span)
    except Exception:  # an odd value where a marker belongs: not a step we can read
        return None
    return kind


def _cached(span: SpanRecord) -> GenAIView | None:
    # one dict read is atomic (under the GIL, and per-dict locks without it): only writers
    # take the lock, so a receiver thread deciding holds never waits on the tick thread
    hit = _CACHE.get(id(span))
    if hit is not None and hit[0] is span and hit[1] == len(span.events):
        return hit[2]
    return None


def read_span(span: SpanRecord) -> GenAIView:
    """The canonical reading of ``span``; never raises (a failing reader leaves a note)."""
    hit = _cached(span)
    if hit is not None:
        return hit
    view = GenAIView(span)
    dialect = builtin_dialect_of(span)
    declared_reader = declared.reader_for(span)
    if dialect is not None:
        view.dialect = str(dialect.NAME)
        reader: Callable[[GenAIView], None] = dialect.read
        try:
            reader(view)
        except Exception as exc:  # an unforeseen shape: the view says why, planning goes on
            view.note("input", f"reading span {span.span_id} failed: {type(exc).__name__}: {exc}")
    if declared_reader is not None:
        # the team's reader wins over the dialect's reading; what it leaves unset stays
        view.dialect = declared_reader.dialect_name
        try:
            declared.apply(declared_reader, view)
        except Exception as exc:  # never: the sources are checked when the reader is made
            view.note("input", f"reader {declared_reader.name!r} failed: {exc}")
    if view.dialect is not None:
        try:
            common_rules.finish(view)
        except Exception as exc:  # never: but a view must come back whatever the span holds
            view.note("input", f"reading span {span.span_id} failed: {type(exc).__name__}: {exc}")
    if view.conversation_id is None:
        # the key the store indexed the span by, so planning and the store agree (read for
        # every span: an app's own span around the GenAI steps often carries the session)
        view.conversation_id = span.conversation_id
    with _CACHE_LOCK:
        _CACHE.pop(id(span), None)
        while len(_CACHE) >= _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[id(span)] = (span, len(span.events), view)
    return view


def span_shape(span: SpanRecord) -> tuple[str, str, tuple[str, ...]]:
    """What identifies an unrecognised span's shape in logs: service, scope and the attribute
    key prefixes it carries (``http.*``, ``db.*``...)."""
    prefixes = sorted({key.split(".", 1)[0] for key in span.attributes})
    return (span.service_name or "?", span.scope_name or "?", tuple(prefixes))
