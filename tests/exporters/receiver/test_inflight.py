"""Request bodies in flight are bounded by bytes: while requests hold ``max_inflight_bytes``
(being read, decoded or stored), another is answered 503 with Retry-After, and the bytes come
back once they are answered."""

from __future__ import annotations

import gzip
import threading

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer
from tests.exporters.receiver.conftest import make_sdk_spans

PB = {"Content-Type": "application/x-protobuf"}


def test_a_request_past_the_bytes_in_flight_gets_503_and_retry_after() -> None:
    body = encode_spans(make_sdk_spans()).SerializeToString()
    entered, release = threading.Event(), threading.Event()
    stored: list[SpanRecord] = []

    def slow_sink(records: list[SpanRecord]) -> None:
        entered.set()
        assert release.wait(10)
        stored.extend(records)

    app = create_receiver_app(sink=slow_sink, max_inflight_bytes=len(body) + 10)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        first: list[httpx.Response] = []
        holder = threading.Thread(
            target=lambda: first.append(client.post("/v1/traces", content=body, headers=PB))
        )
        holder.start()
        assert entered.wait(10)  # the first request holds its bytes inside the sink
        refused = client.post("/v1/traces", content=body, headers=PB)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        # an inflated body counts too: a small gzip body inflating past the bound is refused
        packed = gzip.compress(body)
        zipped = client.post(
            "/v1/traces", content=packed, headers={**PB, "Content-Encoding": "gzip"}
        )
        assert zipped.status_code == 503
        release.set()
        holder.join(10)
        assert first[0].status_code == 200
        # answered: the bytes are back, the next request is taken
        assert client.post("/v1/traces", content=body, headers=PB).status_code == 200
    assert len(stored) == 2 * len(make_sdk_spans())
