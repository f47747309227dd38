"""Send serialized OTLP trace requests downstream (enrich mode forwards spans as received).

:func:`bytes_sender` wraps the span exporter the worker was given. The SDK's OTLP/HTTP exporter
already holds an HTTP client configured from its arguments and the ``OTEL_EXPORTER_OTLP_*``
settings (endpoint, headers, TLS, compression, timeout, retries); the request body is posted
through that client as it is. Any other exporter (an in-memory one in tests, a custom one) gets
the spans decoded from the body as SDK spans, which keeps ids, times, attributes, events,
status, resource and scope but not links, trace state or dropped counts.

Example::

    send = bytes_sender(OTLPSpanExporter(endpoint="http://collector:4318/v1/traces"))
    ok = send(body)   # True once the backend took the request
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from spanjudge._receive.decode import decode_protobuf
from spanjudge.exporters._convert import to_readable_span

__all__ = ["bytes_sender"]

logger = logging.getLogger("spanjudge.enrich")

Sender = Callable[[bytes], bool]


def _client_export(exporter: SpanExporter) -> Callable[[bytes], object] | None:
    """The OTLP/HTTP exporter's own client's ``export(body)``, when this SDK version has one."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:  # pragma: no cover - the package is a dependency
        return None
    if type(exporter) is not OTLPSpanExporter:
        return None
    export = getattr(getattr(exporter, "_client", None), "export", None)
    return export if callable(export) else None


def bytes_sender(exporter: SpanExporter) -> Sender:
    """A function posting one serialized ``ExportTraceServiceRequest`` through ``exporter``;
    it returns whether the backend took it (it never raises)."""
    export = _client_export(exporter)
    if export is not None:
        post = export

        def send(body: bytes) -> bool:
            try:
                return bool(getattr(post(body), "success", False))
            except Exception:
                logger.debug("span forward raised", exc_info=True)
                return False

        return send
    logger.info(
        "enrich mode: %s takes SDK spans, so forwarded spans are decoded for it (links, trace"
        " state and dropped counts are only kept by the OTLP/HTTP exporter)",
        type(exporter).__name__,
    )

    def decode_and_export(body: bytes) -> bool:
        try:
            spans = [to_readable_span(record) for record in decode_protobuf(body)]
            return exporter.export(spans) is SpanExportResult.SUCCESS
        except Exception:
            logger.debug("span export raised", exc_info=True)
            return False

    return decode_and_export
