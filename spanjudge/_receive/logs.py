"""Decode OTLP log export bodies (protobuf or OTLP/JSON) into the GenAI content events among
their records (:class:`LogEvent`): records named ``gen_ai.*``, never our own
``gen_ai.evaluation.result``. Values and ids are read as for spans
(:mod:`~spanjudge._receive.decode`); every malformed input raises
:class:`~spanjudge._receive.decode.OtlpDecodeError`.

Example::

    skipped: Counter[str] = Counter()
    events = decode_logs(body, "application/json", ignored=skipped)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from spanjudge._core.span_record import LogEvent
from spanjudge._receive.decode import (
    OtlpDecodeError,
    any_value,
    attributes_of,
    hex_id,
    parse_request,
    time_ns,
)
from spanjudge._receive.limits import DecodeLimits
from spanjudge.tracer import _attributes as attrs

# Log records kept by decode_logs(): GenAI content events, never our own evaluation results
# (reading those back as content would evaluate our own output).
GENAI_EVENT_PREFIX = "gen_ai."
# Where SDKs before the LogRecord.event_name field (OTLP 1.5) put the event name.
EVENT_NAME_ATTRIBUTE = "event.name"
# Why a log record was not kept (keys of the ``ignored`` counter of decode_logs()).
IGNORED_NOT_GENAI = "not_genai"
IGNORED_OWN_RESULT = "own_result"
IGNORED_NO_TRACE = "no_trace_id"


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
    attributes = attributes_of(record.attributes)
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
    trace_id = hex_id(record.trace_id, 16, "trace id")
    assert trace_id is not None
    span_id = hex_id(record.span_id, 8, "span id", optional=True) if any(record.span_id) else None
    return LogEvent(
        trace_id=trace_id,
        span_id=span_id,
        event_name=name,
        time_unix_nano=time_ns(record.time_unix_nano or record.observed_time_unix_nano, "time"),
        attributes=attributes,
        body=any_value(record.body) if record.HasField("body") else None,
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
    ``own_result``, ``no_trace_id``). A kept record with an invalid id or time raises
    :class:`OtlpDecodeError`, unless ``rejected`` is a list (as in records_from_request).
    """
    events: list[LogEvent] = []
    for rl in request.resource_logs:
        if not rl.scope_logs:  # nothing to read its resource for
            continue
        resource = attributes_of(rl.resource.attributes)
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
    limits: DecodeLimits | None = None,
) -> list[LogEvent]:
    """Decode an ``ExportLogsServiceRequest`` by media type (``application/x-protobuf`` or
    ``application/json``, hex ids) into its GenAI content events; see events_from_request for
    ``rejected`` and ``ignored``. Any malformed input raises :class:`OtlpDecodeError`, a
    request holding more than ``limits`` allow :class:`~spanjudge._receive.decode.
    OtlpLimitError` (before its records are built).

    Example::

        skipped: Counter[str] = Counter()
        events = decode_logs(body, "application/x-protobuf", ignored=skipped)
    """
    request = parse_request(body, media_type, ExportLogsServiceRequest(), limits)
    try:
        return events_from_request(request, rejected, ignored)
    except OtlpDecodeError:
        raise
    except (RecursionError, ValueError, TypeError) as exc:
        raise OtlpDecodeError(f"invalid log record data: {exc}") from None
