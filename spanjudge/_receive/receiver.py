"""An OTLP/HTTP receiver: ``POST /v1/traces`` hands decoded spans to a sink, ``POST /v1/logs``
the GenAI content events among the log records to a second one (404 without it).

Both signals share one request handler. It speaks what an OpenTelemetry SDK or a Collector's
``otlphttp`` exporter expects, so they retry exactly when they should: 200 with an
``ExportTraceServiceResponse`` (``ExportLogsServiceResponse``) in the request's encoding; 400
for a malformed body (a ``google.rpc.Status`` message says why); 401 without the right bearer
token (compared in constant time); 413 over the body or decompressed-size limit (checked on
``Content-Length`` first, then while streaming, so a gzip bomb never inflates past the limit)
or over the decode limits (objects, spans or log records per request: counted before they are
built, :mod:`~spanjudge._receive.limits`);
415 for other media types or content encodings; 503 with ``Retry-After`` when the store is not
keeping up (``backpressure()`` returns seconds, or the sink raises :class:`Backpressure` or
fails). ``GET /healthz`` (live), ``GET /readyz`` (``ready()``) and an optional ``/metrics``
mount complete it.

Example::

    app = create_receiver_app(
        sink=store.write_spans, log_sink=store.write_logs, bearer_token="s3cret"
    )
    serve_receiver(app, host="127.0.0.1", port=4318)
"""

from __future__ import annotations

import hmac
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from spanjudge._core.span_record import LogEvent, SpanRecord
from spanjudge._core.telemetry import Telemetry
from spanjudge._receive.decode import (
    JSON,
    PROTOBUF,
    OtlpDecodeError,
    OtlpLimitError,
    decode_traces,
    parse_request,
    records_from_request,
)
from spanjudge._receive.feedback_route import feedback_endpoint
from spanjudge._receive.http import (
    Backpressure,
    Rejected,
    gunzip_limited,
    media_type,
    read_limited,
    rejection,
    retry_after_header,
    store_failed,
)
from spanjudge._receive.limits import (
    DEFAULT_LIMITS,
    MAX_BODY_BYTES,
    MAX_DECOMPRESSED_BYTES,
    MAX_INFLIGHT_BYTES,
    DecodeLimits,
    InFlight,
)
from spanjudge._receive.logs import decode_logs

__all__ = [
    "Screen",
    "create_receiver_app",
]

logger = logging.getLogger("spanjudge.receiver")

Sink = Callable[[list[SpanRecord]], None]
LogSink = Callable[[list[LogEvent]], None]


class Screen(Protocol):
    """Which spans of a request are worth decoding, asked per span with its raw trace id and
    its W3C ``tracestate`` before its attributes are read (the worker's ingest decision: a
    trace no rule can pick is passed over, :mod:`spanjudge.worker.keep_policy`)."""

    def wanted(self, trace_id: bytes, trace_state: str = "") -> bool: ...

    def passed_over(self, count: int) -> None: ...


def _prune(request: ExportTraceServiceRequest, screen: Screen) -> int:
    """Remove the spans ``screen`` does not want from ``request``; how many were removed. A
    screen that raises wants the spans of that scope (they are decoded, and judged by the
    decoder, as before)."""
    wanted = screen.wanted
    removed = 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            spans = ss.spans
            try:
                flags = [bool(wanted(span.trace_id, span.trace_state)) for span in spans]
            except Exception:
                continue
            unwanted = flags.count(False)
            if not unwanted:
                continue
            removed += unwanted
            if unwanted == len(flags):
                del spans[:]
                continue
            for index in range(len(flags) - 1, -1, -1):
                if not flags[index]:
                    del spans[index]
    return removed


def _screened_traces(
    body: bytes, media: str, rejected: list[str], limits: DecodeLimits, screen: Screen
) -> tuple[list[SpanRecord], int]:
    """Decode a traces request, building records only for the spans ``screen`` wants: the
    protobuf parse is C code, the records cost ~20 us a span in Python (measured), so a worker
    that keeps 1% of the traces skips nearly all of that."""
    request = parse_request(body, media, ExportTraceServiceRequest(), limits)
    removed = _prune(request, screen)
    try:
        records = records_from_request(request, rejected)
    except OtlpDecodeError:
        raise
    except (RecursionError, ValueError, TypeError) as exc:
        raise OtlpDecodeError(f"invalid span data: {exc}") from None
    return records, removed


@dataclass(frozen=True)
class _Signal:
    """What differs between /v1/traces and /v1/logs: the decoder, the answer, the words."""

    items: str  # "spans" | "log records", for messages
    decode: Callable[[bytes, str, list[str], DecodeLimits], Sequence[Any]]
    response: Callable[[], Any]  # ExportTraceServiceResponse | ExportLogsServiceResponse
    rejected_field: str  # its partial_success counter

    def success(self, media: str, rejected: list[str]) -> Response:
        # Items with invalid ids or times are dropped alone, not the whole batch: OTLP partial
        # success tells the client how many, and it must not retry them.
        message: Message = self.response()
        if rejected:
            setattr(message.partial_success, self.rejected_field, len(rejected))  # type: ignore[attr-defined]
            more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
            message.partial_success.error_message = rejected[0] + more  # type: ignore[attr-defined]
        if media == PROTOBUF:
            return Response(message.SerializeToString(), media_type=PROTOBUF)
        return Response(json_format.MessageToJson(message, indent=None), media_type=JSON)


def _decode_logs(
    body: bytes, media: str, rejected: list[str], limits: DecodeLimits
) -> list[LogEvent]:
    ignored: Counter[str] = Counter()
    events = decode_logs(body, media, rejected=rejected, ignored=ignored, limits=limits)
    if ignored:
        # other logs share the pipeline (a Collector forwards all of them): expected, quiet
        logger.debug("receiver ignored log records: %s", dict(ignored))
    return events


_TRACES = _Signal(
    "spans",
    lambda body, media, rejected, limits: decode_traces(
        body, media, rejected=rejected, limits=limits
    ),
    ExportTraceServiceResponse,
    "rejected_spans",
)
_TRACES_WITH_BYTES = replace(
    _TRACES,
    decode=lambda body, media, rejected, limits: decode_traces(
        body, media, rejected=rejected, keep_bytes=True, limits=limits
    ),
)
_LOGS = _Signal("log records", _decode_logs, ExportLogsServiceResponse, "rejected_log_records")


def create_receiver_app(
    *,
    sink: Sink,
    log_sink: LogSink | None = None,
    bearer_token: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_inflight_bytes: int = MAX_INFLIGHT_BYTES,
    ready: Callable[[], bool] | None = None,
    backpressure: Callable[[], float | None] | None = None,
    telemetry: Telemetry | None = None,
    metrics_app: Any = None,
    feedback_sink: Callable[[bytes], dict[str, Any]] | None = None,
    keep_span_bytes: bool = False,
    limits: DecodeLimits = DEFAULT_LIMITS,
    screen: Screen | None = None,
) -> Starlette:
    """Build the receiver's ASGI app; ``sink(records)`` (spans) and ``log_sink(events)`` (GenAI
    content events from ``/v1/logs``, served only when given) run in a worker thread per request;
    so does ``feedback_sink`` (``POST /v1/feedback``,
    :mod:`~spanjudge._receive.feedback_route`). ``keep_span_bytes`` (enrich mode): the sink
    gets a :class:`~spanjudge._receive.decode.ReceivedSpans` with each span's bytes.
    ``limits``: what one request may hold (objects, spans or log records), refused with 413
    before it is decoded. ``screen`` (not with ``keep_span_bytes``): spans of traces it does not
    want are not decoded nor given to the sink (counted as received all the same).
    ``max_inflight_bytes``: the bodies (as sent, and inflated) all requests being read,
    decoded or stored hold at once; a request that would pass it gets 503 + Retry-After.

    Example::

        received: list[SpanRecord] = []
        events: list[LogEvent] = []
        app = create_receiver_app(sink=received.extend, log_sink=events.extend)
    """
    expected = bearer_token.encode() if bearer_token else None
    inflight = InFlight(max_inflight_bytes)
    spans_signal = _TRACES_WITH_BYTES if keep_span_bytes else _TRACES
    if screen is not None and not keep_span_bytes:
        screening = screen
        spans_signal = replace(
            _TRACES,
            decode=lambda body, media, rejected, limits: _screened_traces(
                body, media, rejected, limits, screening
            ),
        )

    def check_auth(request: Request) -> None:
        if expected is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        # Compare even on a wrong scheme so timing does not tell which part was wrong.
        ok = hmac.compare_digest(token.strip().encode(), expected)
        if not (ok and scheme.lower() == "bearer"):
            raise Rejected(
                401,
                "missing or invalid bearer token",
                {"WWW-Authenticate": 'Bearer realm="spanjudge"'},
            )

    def decode_body(
        signal: _Signal, body: bytes, media: str, content_encoding: str, held: list[int]
    ) -> tuple[Sequence[Any], list[str], int]:
        if content_encoding == "gzip":
            body = gunzip_limited(body, max_decompressed_bytes)
            _hold(held, len(body))
        elif len(body) > max_decompressed_bytes:
            raise Rejected(413, f"body exceeds the limit of {max_decompressed_bytes} bytes")
        rejected: list[str] = []
        try:
            decoded = signal.decode(body, media, rejected, limits)
        except OtlpLimitError as exc:
            # too big, not malformed: 413, which clients do not retry either
            raise Rejected(413, str(exc)) from None
        except OtlpDecodeError as exc:
            raise Rejected(400, str(exc)) from None
        if isinstance(decoded, tuple):  # screened: (records, spans passed over)
            return decoded[0], rejected, decoded[1]
        return decoded, rejected, 0

    def _hold(held: list[int], size: int) -> None:
        """Count ``size`` more bytes in flight for this request, or refuse it (503)."""
        if not inflight.take(size):
            raise Rejected(
                503,
                "too many request bytes in flight; retry later",
                {"Retry-After": retry_after_header(1.0)},
            )
        held.append(size)

    def answer(status: int, media: str, encoding: str, spans: int = 0) -> None:
        if telemetry is not None:
            telemetry.record_receiver_request(status, encoding, spans)

    async def export(
        request: Request, signal: _Signal, store: Callable[[list[Any]], None]
    ) -> Response:
        media = media_type(request.headers.get("content-type"))
        encoding = {PROTOBUF: "protobuf", JSON: "json"}.get(media, "other")
        reply_media = media if media in (PROTOBUF, JSON) else JSON
        held: list[int] = []  # bytes this request holds in flight
        try:
            check_auth(request)
            if encoding == "other":
                raise Rejected(415, f"unsupported Content-Type {media!r}; use {PROTOBUF} or {JSON}")
            content_encoding = request.headers.get("content-encoding", "identity").strip().lower()
            if content_encoding not in ("identity", "gzip", ""):
                raise Rejected(415, f"unsupported Content-Encoding {content_encoding!r}")
            if backpressure is not None:
                wait = backpressure()
                if wait is not None:
                    raise Rejected(
                        503, "store is not keeping up", {"Retry-After": retry_after_header(wait)}
                    )
            # bytes in flight: what the body may take (its Content-Length, else the body
            # limit), before it is read; its inflated size too, before it is decoded
            _hold(held, _declared_size(request, max_body_bytes))
            body = await read_limited(request, max_body_bytes)
            # Inflating and decoding megabytes is CPU work: off the event loop, so health
            # probes and other requests are answered meanwhile.
            records, rejected, passed = await run_in_threadpool(
                decode_body, signal, body, media, content_encoding, held
            )
            if records:
                try:
                    # (a list already, maybe a ReceivedSpans with the spans' bytes: kept)
                    batch = records if isinstance(records, list) else list(records)
                    await run_in_threadpool(store, batch)
                except Backpressure as exc:
                    raise Rejected(
                        503, str(exc), {"Retry-After": retry_after_header(exc.retry_after)}
                    ) from None
                except Exception as exc:
                    logger.warning("receiver sink failed", exc_info=True)
                    raise store_failed(signal.items, exc) from None
        except Rejected as reject:
            answer(reject.status, media, encoding)
            return rejection(reject, reply_media)
        finally:
            for size in held:
                inflight.give(size)
        # the span counter counts spans only; log requests are counted by code and encoding
        if passed and screen is not None:
            # counted once the request is answered 200 (a refused one is sent again)
            screen.passed_over(passed)
        received = len(records) + passed  # passed over by the screen: received all the same
        answer(200, media, encoding, received if signal is spans_signal else 0)
        return signal.success(media, rejected)

    async def traces(request: Request) -> Response:
        return await export(request, spans_signal, sink)

    async def logs(request: Request) -> Response:
        assert log_sink is not None  # routed only when given
        return await export(request, _LOGS, log_sink)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        try:
            is_ready = ready() if ready is not None else True
        except Exception:
            logger.warning("readiness check failed", exc_info=True)
            is_ready = False
        if is_ready:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready"}, status_code=503)

    routes: list[Route | Mount] = [
        Route("/v1/traces", traces, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    if log_sink is not None:
        routes.append(Route("/v1/logs", logs, methods=["POST"]))
    if feedback_sink is not None:
        sizes = (max_body_bytes, max_decompressed_bytes)
        handler = feedback_endpoint(feedback_sink, check_auth, answer, sizes)
        routes.append(Route("/v1/feedback", handler, methods=["POST"]))
    if metrics_app is not None:
        # Served at exactly /metrics (no redirect to /metrics/), where Prometheus scrapes.
        routes.append(Route("/metrics", _AsgiEndpoint(metrics_app), methods=["GET"]))
        routes.append(Mount("/metrics", app=metrics_app))
    return Starlette(routes=routes)


def _declared_size(request: Request, limit: int) -> int:
    """The body's Content-Length when it is a number within ``limit``, else ``limit``."""
    try:
        size = int(request.headers.get("content-length", ""))
    except ValueError:
        return limit
    return size if 0 <= size <= limit else limit


class _AsgiEndpoint:
    # Starlette treats plain functions as request handlers; an instance is mounted as ASGI.
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
