"""A real OTLP/HTTP trace and log receiver on 127.0.0.1 for end-to-end tests.

It decodes every ``POST /v1/traces`` and ``POST /v1/logs`` protobuf (or gzip) body with the
official proto classes and keeps the spans and log records, so a test can assert on exactly what
went over the wire::

    with OtlpSink() as sink:
        exporter = OTLPSpanExporter(endpoint=sink.traces_url)
        ...
        spans = sink.wait_for(lambda s: len(s) >= 2)

``OtlpSink(traces_only=True)`` is a backend that takes traces only, as Jaeger, Tempo and Phoenix
are: ``/v1/logs`` answers 404 (``logs_status`` to answer 405 or 501) and keeps nothing; it only
counts the requests (``refused_log_requests``). Set ``sink.traces_only = False`` to start taking
logs (a Collector put in front).
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def any_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status_code: int = 0
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0


@dataclass
class ReceivedLog:
    trace_id: str
    span_id: str
    event_name: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope_name: str
    body: Any = None
    severity_number: int = 0
    time_unix_nano: int = 0


class OtlpSink:
    def __init__(
        self, status: int = 200, logs_status: int | None = None, *, traces_only: bool = False
    ) -> None:
        self.spans: list[ReceivedSpan] = []
        self.logs: list[ReceivedLog] = []
        self.requests = 0
        self.log_requests = 0
        self.traces_only = traces_only
        self.refused_log_requests = 0  # /v1/logs requests a traces-only sink turned away
        self.log_bodies: list[bytes] = []  # raw protobuf bodies of /v1/logs, as received
        self.trace_bodies: list[bytes] = []  # and of /v1/traces
        self.logs_status = logs_status
        self.status = status
        self._cond = threading.Condition()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                status = sink.status
                if self.path.rstrip("/").endswith("/v1/logs") and sink.traces_only:
                    with sink._cond:
                        sink.refused_log_requests += 1
                        sink._cond.notify_all()
                    self._answer(sink.logs_status or 404, b"404 page not found\n", "text/plain")
                    return
                if self.path.rstrip("/").endswith("/v1/logs"):
                    sink._add_logs(body)
                    payload = ExportLogsServiceResponse().SerializeToString()
                    status = sink.logs_status if sink.logs_status is not None else status
                else:
                    sink.trace_bodies.append(body)
                    sink._add(ExportTraceServiceRequest.FromString(body))
                    payload = ExportTraceServiceResponse().SerializeToString()
                self._answer(status, payload, "application/x-protobuf")

            def _answer(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def traces_url(self) -> str:
        return f"{self.endpoint}/v1/traces"

    @property
    def logs_url(self) -> str:
        return f"{self.endpoint}/v1/logs"

    def _add_logs(self, body: bytes) -> None:
        request = ExportLogsServiceRequest.FromString(body)
        received = []
        for rl in request.resource_logs:
            resource = {kv.key: any_value(kv.value) for kv in rl.resource.attributes}
            for sl in rl.scope_logs:
                for r in sl.log_records:
                    received.append(
                        ReceivedLog(
                            trace_id=r.trace_id.hex(),
                            span_id=r.span_id.hex(),
                            event_name=r.event_name,
                            attributes={kv.key: any_value(kv.value) for kv in r.attributes},
                            resource=resource,
                            scope_name=sl.scope.name,
                            body=any_value(r.body),
                            severity_number=r.severity_number,
                            time_unix_nano=r.time_unix_nano,
                        )
                    )
        with self._cond:
            self.log_requests += 1
            self.log_bodies.append(body)
            self.logs.extend(received)
            self._cond.notify_all()

    def wait_for_logs(
        self, predicate: Callable[[list[ReceivedLog]], bool], timeout: float = 10.0
    ) -> list[ReceivedLog]:
        """Block until ``predicate(logs)`` holds; raise AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.logs):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"OTLP sink: log condition not met in {timeout}s; got {len(self.logs)}"
                    )
                self._cond.wait(remaining)
            return list(self.logs)

    def _add(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for rs in request.resource_spans:
            resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    received.append(
                        ReceivedSpan(
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex() or None,
                            name=s.name,
                            attributes={kv.key: any_value(kv.value) for kv in s.attributes},
                            resource=resource,
                            events=[
                                (e.name, {kv.key: any_value(kv.value) for kv in e.attributes})
                                for e in s.events
                            ],
                            status_code=s.status.code,
                            start_time_unix_nano=s.start_time_unix_nano,
                            end_time_unix_nano=s.end_time_unix_nano,
                        )
                    )
        with self._cond:
            self.requests += 1
            self.spans.extend(received)
            self._cond.notify_all()

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 10.0
    ) -> list[ReceivedSpan]:
        """Block until ``predicate(spans)`` holds; raise AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.spans):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"OTLP sink: condition not met in {timeout}s; got {len(self.spans)} spans: "
                        f"{[s.name for s in self.spans]}"
                    )
                self._cond.wait(remaining)
            return list(self.spans)

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
