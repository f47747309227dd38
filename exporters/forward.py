"""Turn a stored :class:`SpanRecord` back into an SDK span, to send it on over OTLP.

The worker's enrich mode forwards the spans it received to the trace backend; the SDK's OTLP
exporter encodes ``ReadableSpan`` objects, so a record is rebuilt into one with its original ids,
times, status, resource and scope (plus any score attributes the worker adds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from spanjudge.exporters.records import SpanRecord

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
