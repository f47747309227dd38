"""Decode OTLP export bodies (protobuf or OTLP/JSON): traces into :class:`SpanRecord` objects,
logs into the GenAI content events among them (:class:`LogEvent`).

The records are the same as :func:`spanjudge.exporters.store_exporter.span_to_record` builds from
the SDK span that was sent: lower-case hex ids, nanosecond times, ``kind`` and ``status_code`` as
OTel enum names, array attributes as lists. Values the SDK cannot produce map as follows:
a ``kvlistValue`` becomes a dict, a ``bytesValue`` its UTF-8 text (base64 when not UTF-8).

Every malformed input raises :class:`OtlpDecodeError` (a ``ValueError``) with a message fit for
a 400 response; nothing else escapes, whatever the bytes.

Example::

    records = decode_traces(body, "application/x-protobuf")
    events = decode_logs(body, "application/json")
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from collections.abc import Mapping
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from spanjudge.exporters.otlp_wire import WireSpan, split_request
from spanjudge.exporters.records import LogEvent, SpanEvent, SpanRecord
from spanjudge.tracer import attributes as attrs

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


# Log records kept by decode_logs(): GenAI content events, never our own evaluation results
# (reading those back as content would evaluate our own output).
GENAI_EVENT_PREFIX = "gen_ai."
# Where SDKs before the LogRecord.event_name field (OTLP 1.5) put the event name.
EVENT_NAME_ATTRIBUTE = "event.name"
# Why a log record was not kept (keys of the ``ignored`` counter of decode_logs()).
IGNORED_NOT_GENAI = "not_genai"
IGNORED_OWN_RESULT = "own_result"
IGNORED_NO_TRACE = "no_trace_id"

_Request = TypeVar("_Request", bound=Message)


class OtlpDecodeError(ValueError):
    """The body is not a valid OTLP export request; the message says why."""


def _any_value(value: AnyValue, depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        raise OtlpDecodeError("attribute value nested too deeply")
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(v, depth + 1) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        raw = value.bytes_value
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    return getattr(value, which)


def _attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        value = _any_value(kv.value)
        if value is not None:  # the SDK drops None-valued attributes too
            out[kv.key] = value
    return out


def _hex_id(raw: bytes, size: int, what: str, *, optional: bool = False) -> str | None:
    if not raw and optional:
        return None
    if len(raw) != size or not any(raw):
        raise OtlpDecodeError(f"invalid {what}: expected {size} non-zero bytes, got {raw.hex()!r}")
    return raw.hex()


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
    """Flatten a decoded request into :class:`SpanRecord` objects, validating ids.

    A span with an invalid id raises :class:`OtlpDecodeError`, unless ``rejected`` is a list:
    then the span is skipped and the reason appended (for an OTLP partial-success answer).
    ``wire``: the request's spans as bytes (:func:`split_request`); the answer is then a
    :class:`ReceivedSpans` keeping those of the spans decoded.
    """
    records: list[SpanRecord] = []
    kept: list[WireSpan] = []
    index = 0
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
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
    trace_id = _hex_id(span.trace_id, 16, "trace id")
    span_id = _hex_id(span.span_id, 8, "span id")
    assert trace_id is not None and span_id is not None
    start = span.start_time_unix_nano
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=span.name,
        start_time_unix_nano=start,
        end_time_unix_nano=span.end_time_unix_nano or start,
        parent_span_id=_hex_id(span.parent_span_id, 8, "parent span id", optional=True),
        kind=_KINDS.get(span.kind, "INTERNAL"),
        status_code=_STATUS.get(span.status.code, "UNSET"),
        status_message=span.status.message or None,
        attributes=_attributes(span.attributes),
        resource=dict(resource),
        events=[
            SpanEvent(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in span.events
        ],
        scope_name=scope_name,
    )


def _parse_protobuf(body: bytes, request: _Request) -> _Request:
    what = type(request).__name__
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise OtlpDecodeError(f"malformed protobuf {what}: {exc}") from None
    except Exception as exc:  # the C decoder may raise other types on hostile bytes
        raise OtlpDecodeError(f"malformed protobuf {what}: {exc}") from None
    return request


def decode_protobuf(
    body: bytes, *, rejected: list[str] | None = None, keep_bytes: bool = False
) -> list[SpanRecord]:
    """Decode a binary ``ExportTraceServiceRequest`` (``rejected``: see records_from_request;
    ``keep_bytes``: answer :class:`ReceivedSpans`, each span's bytes kept as received)."""
    request = _parse_protobuf(body, ExportTraceServiceRequest())
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


def _parse_json(body: bytes, request: _Request) -> _Request:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpDecodeError(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OtlpDecodeError("OTLP/JSON body must be an object")
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
    return request


def decode_json(
    body: bytes, *, rejected: list[str] | None = None, keep_bytes: bool = False
) -> list[SpanRecord]:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, lowerCamelCase or proto field
    names, int64 as strings or numbers, enums as ints or names); ``keep_bytes``: as in
    :func:`decode_protobuf`, the bytes being the spans' protobuf encoding."""
    request = _parse_json(body, ExportTraceServiceRequest())
    return _records_or_error(request, rejected, request.SerializeToString() if keep_bytes else None)


def decode_traces(
    body: bytes,
    content_type: str,
    *,
    rejected: list[str] | None = None,
    keep_bytes: bool = False,
) -> list[SpanRecord]:
    """Decode by media type (``application/x-protobuf`` or ``application/json``)."""
    if content_type == PROTOBUF:
        return decode_protobuf(body, rejected=rejected, keep_bytes=keep_bytes)
    if content_type == JSON:
        return decode_json(body, rejected=rejected, keep_bytes=keep_bytes)
    raise OtlpDecodeError(f"unsupported content type {content_type!r}")


# --- logs ---------------------------------------------------------------------------------------
def content_event_name(event_name: str, attributes: Mapping[str, Any]) -> str | None:
    """The name of a GenAI content event, or None for a record that is not one.

    The name is the record's ``event_name`` field, else its ``event.name`` attribute (SDKs
    before the field existed). Kept: names starting with ``gen_ai.``, except our own
    ``gen_ai.evaluation.result``. Shared by the receiver and the in-process log exporter.

    Example::

        assert content_event_name("gen_ai.client.inference.operation.details", {})
        assert content_event_name("", {"event.name": "gen_ai.evaluation.result"}) is None
    """
    name = event_name or attributes.get(EVENT_NAME_ATTRIBUTE)
    if not isinstance(name, str) or not name.startswith(GENAI_EVENT_PREFIX):
        return None
    return None if name == attrs.GEN_AI_EVALUATION_RESULT_EVENT else name


def ignored_reason(event_name: str, attributes: Mapping[str, Any]) -> str:
    """Why a record :func:`content_event_name` turned down is ignored (``own_result`` for our
    own ``gen_ai.evaluation.result``, else ``not_genai``)."""
    name = event_name or attributes.get(EVENT_NAME_ATTRIBUTE)
    if name == attrs.GEN_AI_EVALUATION_RESULT_EVENT:
        return IGNORED_OWN_RESULT
    return IGNORED_NOT_GENAI


def _log_event(
    record: LogRecord,
    resource: dict[str, Any],
    scope_name: str | None,
    ignored: Counter[str] | None,
) -> LogEvent | None:
    attributes = _attributes(record.attributes)
    name = content_event_name(record.event_name, attributes)
    if name is None:
        # not ours to store: its ids are not checked, a bad one must not fail the batch
        if ignored is not None:
            ignored[ignored_reason(record.event_name, attributes)] += 1
        return None
    if not any(record.trace_id):  # absent or all zeros: logged outside any span
        if ignored is not None:
            ignored[IGNORED_NO_TRACE] += 1
        return None
    trace_id = _hex_id(record.trace_id, 16, "trace id")
    assert trace_id is not None
    span_id = _hex_id(record.span_id, 8, "span id", optional=True) if any(record.span_id) else None
    return LogEvent(
        trace_id=trace_id,
        span_id=span_id,
        event_name=name,
        time_unix_nano=record.time_unix_nano or record.observed_time_unix_nano,
        attributes=attributes,
        body=_any_value(record.body) if record.HasField("body") else None,
        resource=dict(resource),
        scope_name=scope_name,
    )


def events_from_request(
    request: ExportLogsServiceRequest,
    rejected: list[str] | None = None,
    ignored: Counter[str] | None = None,
) -> list[LogEvent]:
    """The GenAI content events of a decoded logs request, in order.

    Other records are left out and counted in ``ignored`` by reason (``not_genai``,
    ``own_result``, ``no_trace_id``). A kept record with an invalid id raises
    :class:`OtlpDecodeError`, unless ``rejected`` is a list (as in records_from_request).
    """
    events: list[LogEvent] = []
    for rl in request.resource_logs:
        resource = _attributes(rl.resource.attributes)
        for sl in rl.scope_logs:
            scope_name = sl.scope.name if sl.HasField("scope") else None
            for record in sl.log_records:
                try:
                    event = _log_event(record, resource, scope_name, ignored)
                except OtlpDecodeError as exc:
                    if rejected is None:
                        raise
                    rejected.append(str(exc))
                    continue
                if event is not None:
                    events.append(event)
    return events


def decode_logs(
    body: bytes,
    media_type: str,
    *,
    rejected: list[str] | None = None,
    ignored: Counter[str] | None = None,
) -> list[LogEvent]:
    """Decode an ``ExportLogsServiceRequest`` by media type (``application/x-protobuf`` or
    ``application/json``, hex ids) into its GenAI content events; see events_from_request for
    ``rejected`` and ``ignored``. Any malformed input raises :class:`OtlpDecodeError`.

    Example::

        skipped: Counter[str] = Counter()
        events = decode_logs(body, "application/x-protobuf", ignored=skipped)
    """
    if media_type == PROTOBUF:
        request = _parse_protobuf(body, ExportLogsServiceRequest())
    elif media_type == JSON:
        request = _parse_json(body, ExportLogsServiceRequest())
    else:
        raise OtlpDecodeError(f"unsupported content type {media_type!r}")
    try:
        return events_from_request(request, rejected, ignored)
    except OtlpDecodeError:
        raise
    except (RecursionError, ValueError, TypeError) as exc:
        raise OtlpDecodeError(f"invalid log record data: {exc}") from None
