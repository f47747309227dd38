"""SDK spans <-> :class:`~spanjudge._core.span_record.SpanRecord`, both ways.

:func:`span_to_record` reads a finished SDK span (the in-process store exporter);
:func:`to_readable_span` rebuilds an SDK span from a stored record with its original ids, times,
status, resource and scope, so the SDK's OTLP exporter can send it on (enrich mode forwards the
worker's spans this way, with score attributes added).

Example::

    record = span_to_record(finished_span)
    again = to_readable_span(record, {"spanjudge.score.bias.value": 0.0})
    assert again.context.span_id == int(record.span_id, 16)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge.errors import ConfigError

__all__ = ["span_to_record", "to_readable_span"]


# ------------------------------------------------------------------ SDK span -> record
def _attributes(attributes: Any) -> dict[str, Any]:
    if not attributes:
        return {}
    # The SDK's BoundedAttributes copies itself on every iteration; its inner dict does not.
    # (A read-only view around it is unwrapped the same way; anything else goes the slow way.)
    raw = getattr(attributes, "_dict", None)
    out = dict(raw) if isinstance(raw, dict) else dict(attributes.items())
    for key, value in out.items():
        # The SDK keeps sequence attributes as tuples; records carry lists (JSON's shape).
        if type(value) is tuple:
            out[key] = list(value)
    return out


# Every span of a process shares one Resource: convert it once, not per span.
_resource_cache: dict[int, tuple[Any, dict[str, Any]]] = {}


def _resource(resource: Any) -> dict[str, Any]:
    if resource is None:
        return {}
    hit = _resource_cache.get(id(resource))
    if hit is not None and hit[0] is resource:
        return hit[1]
    converted = _attributes(resource.attributes)
    if len(_resource_cache) > 64:
        _resource_cache.clear()
    _resource_cache[id(resource)] = (resource, converted)
    return converted


def span_to_record(span: ReadableSpan) -> SpanRecord:
    """Convert an SDK span to a :class:`SpanRecord` (lower-case hex ids, nanosecond times).

    Example::

        record = span_to_record(finished_span)
        assert len(record.trace_id) == 32
    """
    # span.attributes wraps the BoundedAttributes in a read-only view that hides its inner dict;
    # the SDK span keeps it as _attributes, read-only after end() (the public API is the fallback).
    ctx = span.context
    if ctx is None:
        raise ConfigError("span without a context")
    parent = span.parent
    start = span.start_time or 0
    status = span.status
    scope = span.instrumentation_scope
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        name=span.name,
        start_time_unix_nano=start,
        end_time_unix_nano=span.end_time or start,
        parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
        kind=span.kind.name,
        status_code=status.status_code.name,
        status_message=status.description or None,
        attributes=_attributes(getattr(span, "_attributes", None) or span.attributes),
        resource=_resource(span.resource),
        events=[
            SpanEvent(event.name, event.timestamp or 0, _attributes(event.attributes))
            for event in span.events
        ],
        scope_name=scope.name if scope is not None else None,
    )


# ------------------------------------------------------------------ record -> SDK span
_KINDS = {kind.name: kind for kind in SpanKind}
_STATUS = {code.name: code for code in StatusCode}


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def to_readable_span(
    record: SpanRecord, extra_attributes: Mapping[str, Any] | None = None
) -> ReadableSpan:
    """The SDK span for ``record``; ``extra_attributes`` are added on top of its own."""
    attributes = dict(record.attributes)
    if extra_attributes:
        attributes.update(extra_attributes)
    code = _STATUS.get(record.status_code, StatusCode.UNSET)
    return ReadableSpan(
        name=record.name,
        context=_context(record.trace_id, record.span_id),
        parent=_context(record.trace_id, record.parent_span_id) if record.parent_span_id else None,
        resource=Resource(dict(record.resource)),
        attributes=attributes,
        events=[
            Event(e.name, attributes=dict(e.attributes), timestamp=e.time_unix_nano)
            for e in record.events
        ],
        kind=_KINDS.get(record.kind, SpanKind.INTERNAL),
        status=Status(code, record.status_message if code is StatusCode.ERROR else None),
        start_time=record.start_time_unix_nano,
        end_time=record.end_time_unix_nano,
        instrumentation_scope=InstrumentationScope(record.scope_name or "unknown"),
    )
