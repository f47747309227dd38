"""Decode OTLP export bodies (protobuf or OTLP/JSON): traces into :class:`SpanRecord` objects.
Logs are read by :mod:`~spanjudge._receive.logs` with the same parsing and values.

The records are the same as :func:`spanjudge.exporters._store_spans.span_to_record` builds
from the SDK span that was sent: lower-case hex ids, nanosecond times, ``kind`` and ``status_code``
as OTel enum names, array attributes as lists. Values the SDK cannot produce map as follows:
a ``kvlistValue`` becomes a dict, a ``bytesValue`` its UTF-8 text (base64 when not UTF-8).

Every malformed input raises :class:`OtlpDecodeError` (a ``ValueError``) with a message fit for
a 400 response; nothing else escapes, whatever the bytes. Given ``limits``
(:class:`~spanjudge._receive.limits.DecodeLimits`, as the receiver does), a request
holding more than they allow raises :class:`OtlpLimitError` (an :class:`OtlpDecodeError`)
before its objects are built.

Example::

    records = decode_traces(body, "application/x-protobuf")
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from spanjudge._core.otlp_wire import WireSpan, split_request
from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge._receive.limits import DecodeLimits, bound_for, unstorable_span
from spanjudge.errors import SpanjudgeError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

_KINDS = {
    Span.SPAN_KIND_UNSPECIFIED: "INTERNAL",
    Span.SPAN_KIND_INTERNAL: "INTERNAL",
    Span.SPAN_KIND_SERVER: "SERVER",
    Span.SPAN_KIND_CLIENT: "CLIENT",
    Span.SPAN_KIND_PRODUCER: "PRODUCER",
    Span.SPAN_KIND_CONSUMER: "CONSUMER",
}
_STATUS = {
    Status.STATUS_CODE_UNSET: "UNSET",
    Status.STATUS_CODE_OK: "OK",
    Status.STATUS_CODE_ERROR: "ERROR",
}
# OTLP/JSON carries ids as hex where protobuf-JSON expects base64: these keys are rewritten.
_ID_KEYS = frozenset({"traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"})
_MAX_DEPTH = 64  # nesting we accept in AnyValue (arrays / kvlists inside each other)
# OTLP times are unsigned 64-bit, the store's time columns signed (SQLite INTEGER, PostgreSQL
# BIGINT): a later time (past the year 2262) would fail the whole batch at the store with an
# OverflowError, so the one item carrying it is refused here instead.
MAX_TIME_NS = 2**63 - 1


_Request = TypeVar("_Request", bound=Message)


class OtlpDecodeError(SpanjudgeError, ValueError):
    """The body is not a valid OTLP export request; the message says why."""


class OtlpLimitError(OtlpDecodeError):
    """The request holds more than the decode limits allow (the receiver answers 413)."""


def _within(problem: str | None) -> None:
    if problem is not None:
        raise OtlpLimitError(problem)


def any_value(value: AnyValue, depth: int = 0) -> Any:
    """An ``AnyValue`` as a Python value (see the module docstring for the mapping)."""
    if depth > _MAX_DEPTH:
        raise OtlpDecodeError("attribute value nested too deeply")
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v, depth + 1) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        raw = value.bytes_value
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    return getattr(value, which)


def attributes_of(kvs: Any) -> dict[str, Any]:
    """Repeated ``KeyValue`` attributes as a dict."""
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        value = any_value(kv.value)
        if value is not None:  # the SDK drops None-valued attributes too
            out[kv.key] = value
    return out


def hex_id(raw: bytes, size: int, what: str, *, optional: bool = False) -> str | None:
    """A ``size``-byte id as lower-case hex; :class:`OtlpDecodeError` names ``what`` if not."""
    if not raw and optional:
        return None
    if len(raw) != size or not any(raw):
        raise OtlpDecodeError(f"invalid {what}: expected {size} non-zero bytes, got {raw.hex()!r}")
    return raw.hex()


def time_ns(value: int, what: str) -> int:
    """``value`` (nanoseconds since the epoch) if the store can hold it; :class:`OtlpDecodeError`
    naming ``what`` if not."""
    if value > MAX_TIME_NS:
        raise OtlpDecodeError(
            f"{what} of {value} ns is out of range: times must be at most {MAX_TIME_NS} ns"
        )
    return value


class ReceivedSpans(list[SpanRecord]):
    """Decoded spans with, in ``wire``, each one's protobuf bytes as received (same order)."""

    def __init__(self, records: list[SpanRecord], wire: list[WireSpan]) -> None:
        super().__init__(records)
        self.wire = wire


def records_from_request(
    request: ExportTraceServiceRequest,
    rejected: list[str] | None = None,
    wire: list[WireSpan] | None = None,
) -> list[SpanRecord]:
    """Flatten a decoded request into :class:`SpanRecord` objects, validating ids and times.

    A span with an invalid id or a time the store cannot hold raises :class:`OtlpDecodeError`,
    unless ``rejected`` is a list: then the span is skipped and the reason appended (for an
    OTLP partial-success answer).
    ``wire``: the request's spans as bytes (:func:`split_request`); the answer is then a
    :class:`ReceivedSpans` keeping those of the spans decoded.
    """
    records: list[SpanRecord] = []
    kept: list[WireSpan] = []
    index = 0
    for rs in request.resource_spans:
        if not rs.scope_spans:  # nothing to read its resource for (a million empty: 3 s saved)
            continue
        resource = attributes_of(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope_name = ss.scope.name if ss.HasField("scope") else None
            for span in ss.spans:
                index += 1
                try:
                    record = _record(span, resource, scope_name)
                except OtlpDecodeError as exc:
                    if rejected is None:
                        raise
                    rejected.append(str(exc))
                    continue
                records.append(record)
                if wire is not None:
                    kept.append(wire[index - 1])
    return records if wire is None else ReceivedSpans(records, kept)


def _record(span: Span, resource: dict[str, Any], scope_name: str | None) -> SpanRecord:
    trace_id = hex_id(span.trace_id, 16, "trace id")
    span_id = hex_id(span.span_id, 8, "span id")
    assert trace_id is not None and span_id is not None
    start = time_ns(span.start_time_unix_nano, "start time")
    record = SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=span.name,
        start_time_unix_nano=start,
        end_time_unix_nano=time_ns(span.end_time_unix_nano, "end time") or start,
        parent_span_id=hex_id(span.parent_span_id, 8, "parent span id", optional=True),
        kind=_KINDS.get(span.kind, "INTERNAL"),
        status_code=_STATUS.get(span.status.code, "UNSET"),
        status_message=span.status.message or None,
        attributes=attributes_of(span.attributes),
        resource=dict(resource),
        events=[
            SpanEvent(e.name, e.time_unix_nano, attributes_of(e.attributes)) for e in span.events
        ],
        scope_name=scope_name,
        trace_state=span.trace_state or None,
    )
    problem = unstorable_span(record)
    if problem is not None:  # refused alone, before the write (OTLP partial success)
        raise OtlpDecodeError(problem)
    return record


def _parse_protobuf(body: bytes, request: _Request, limits: DecodeLimits | None) -> _Request:
    what = type(request).__name__
    bound = bound_for(request, limits)
    if bound is not None:
        try:
            problem = bound.protobuf(body)
        except ValueError as exc:  # the count walked into bytes the parser would refuse
            raise OtlpDecodeError(f"malformed protobuf {what}: {exc}") from None
        _within(problem)
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise OtlpDecodeError(f"malformed protobuf {what}: {exc}") from None
    except Exception as exc:  # the C decoder may raise other types on hostile bytes
        raise OtlpDecodeError(f"malformed protobuf {what}: {exc}") from None
    if bound is not None:
        _within(bound.parsed(request))
    return request


def decode_protobuf(
    body: bytes,
    *,
    rejected: list[str] | None = None,
    keep_bytes: bool = False,
    limits: DecodeLimits | None = None,
) -> list[SpanRecord]:
    """Decode a binary ``ExportTraceServiceRequest`` (``rejected``: see records_from_request;
    ``keep_bytes``: answer :class:`ReceivedSpans`, each span's bytes kept as received;
    ``limits``: see the module docstring)."""
    request = _parse_protobuf(body, ExportTraceServiceRequest(), limits)
    return _records_or_error(request, rejected, body if keep_bytes else None)


def _records_or_error(
    request: ExportTraceServiceRequest, rejected: list[str] | None, body: bytes | None = None
) -> list[SpanRecord]:
    try:
        wire = split_request(body) if body is not None else None
        return records_from_request(request, rejected, wire)
    except OtlpDecodeError:
        raise
    except (RecursionError, ValueError, TypeError) as exc:
        raise OtlpDecodeError(f"invalid span data: {exc}") from None


def _hex_to_b64(value: Any, key: str) -> Any:
    if not isinstance(value, str):
        raise OtlpDecodeError(f"{key} must be a hex string")
    try:
        raw = binascii.unhexlify(value)
    except (binascii.Error, ValueError):
        raise OtlpDecodeError(f"{key} is not valid hex: {value[:64]!r}") from None
    return base64.b64encode(raw).decode("ascii")


def _rewrite_ids(node: Any, depth: int = 0) -> None:
    # Ids sit in spans and links only, at fixed depths; walking every dict is simpler and the
    # key names cannot appear inside attribute values (those are {"key":..,"value":..} pairs).
    if depth > 200:
        raise OtlpDecodeError("JSON nested too deeply")
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS:
                node[key] = _hex_to_b64(value, key)
            else:
                _rewrite_ids(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            _rewrite_ids(item, depth + 1)


def _printable(exc: BaseException) -> str:
    """An error message that can be sent back: lone surrogates from the body replaced."""
    return str(exc).encode("utf-8", "replace").decode("utf-8")


def _parse_json(body: bytes, request: _Request, limits: DecodeLimits | None) -> _Request:
    bound = bound_for(request, limits)
    if bound is not None:
        _within(bound.json_text(body))
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpDecodeError(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OtlpDecodeError("OTLP/JSON body must be an object")
    if bound is not None:
        _within(bound.json_records(data))
    _rewrite_ids(data)
    try:
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except (
        json_format.ParseError,
        RecursionError,
        ValueError,
        TypeError,
        AttributeError,
        OverflowError,  # an infinity where an integer or enum belongs
    ) as exc:
        raise OtlpDecodeError(f"invalid OTLP/JSON: {_printable(exc)}") from None
    except SystemError:
        # protobuf's C extension fails this way on a "\ud800" escape (not valid UTF-8)
        raise OtlpDecodeError("invalid OTLP/JSON: a string is not valid UTF-8") from None
    if bound is not None:
        _within(bound.parsed(request))
    return request


def decode_json(
    body: bytes,
    *,
    rejected: list[str] | None = None,
    keep_bytes: bool = False,
    limits: DecodeLimits | None = None,
) -> list[SpanRecord]:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, lowerCamelCase or proto field
    names, int64 as strings or numbers, enums as ints or names); ``keep_bytes`` and ``limits``:
    as in :func:`decode_protobuf`, the bytes being the spans' protobuf encoding."""
    request = _parse_json(body, ExportTraceServiceRequest(), limits)
    return _records_or_error(request, rejected, request.SerializeToString() if keep_bytes else None)


def parse_request(
    body: bytes, media_type: str, request: _Request, limits: DecodeLimits | None = None
) -> _Request:
    """``request`` (an empty OTLP export request message) filled from ``body`` by media type:
    ``application/x-protobuf`` or ``application/json`` (hex ids). Raises
    :class:`OtlpDecodeError` for anything else or anything malformed, :class:`OtlpLimitError`
    for a request over ``limits`` (trace and log requests are counted before they are built)."""
    if media_type == PROTOBUF:
        return _parse_protobuf(body, request, limits)
    if media_type == JSON:
        return _parse_json(body, request, limits)
    raise OtlpDecodeError(f"unsupported content type {media_type!r}")


def decode_traces(
    body: bytes,
    content_type: str,
    *,
    rejected: list[str] | None = None,
    keep_bytes: bool = False,
    limits: DecodeLimits | None = None,
) -> list[SpanRecord]:
    """Decode by media type (``application/x-protobuf`` or ``application/json``); as
    :func:`decode_protobuf` and :func:`decode_json` do."""
    request = parse_request(body, content_type, ExportTraceServiceRequest(), limits)
    if not keep_bytes:
        return _records_or_error(request, rejected)
    # the spans' protobuf bytes: as received, or encoded from the JSON
    wire = body if content_type == PROTOBUF else request.SerializeToString()
    return _records_or_error(request, rejected, wire)
