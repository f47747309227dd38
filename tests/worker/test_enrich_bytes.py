"""Enrich mode forwards spans as they arrived: a span with links, trace state, flags, dropped
counts, resource and scope details goes through a worker (receiver, store, outbox, OTLP/HTTP
exporter) and reaches the backend with its own bytes unchanged, the held span's scores appended
as attributes after them and nothing else added. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from starlette.testclient import TestClient

from spanjudge._receive.decode import PROTOBUF
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.service import Worker
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink
from tests.support.stores import BACKENDS, POSTGRES_URL, drop_schema, schema_name
from tests.worker.conftest import base_config
from tests.worker.test_enrich import HOLD, IDLE, SETTLE


def app_spans(bodies: list[bytes]) -> list[tuple[Any, Any, Span]]:
    """(ResourceSpans, ScopeSpans, Span) of every app span in the trace request bodies."""
    out = []
    for body in bodies:
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    if not any(kv.key == attrs.GEN_AI_EVALUATION_NAME for kv in s.attributes):
                        out.append((rs, ss, s))
    return out


def enriched_request(demo_request: Any) -> ExportTraceServiceRequest:
    """The first demo trace (an agent turn the bias rule scores, and its steps), every span
    given what the store has no column for: links, trace state, flags, dropped counts; and a
    resource and scope with schema URLs, a scope version and attributes, dropped counts."""
    first = demo_request.resource_spans[0].scope_spans[0].spans[0].trace_id
    out = ExportTraceServiceRequest()
    rs = out.resource_spans.add()
    rs.CopyFrom(demo_request.resource_spans[0])
    rs.resource.dropped_attributes_count = 2
    rs.schema_url = "https://opentelemetry.io/schemas/1.30.0"
    ss = rs.scope_spans[0]
    ss.scope.version = "9.9.9"
    ss.scope.attributes.append(KeyValue(key="scope.k", value=AnyValue(int_value=7)))
    ss.schema_url = "https://example.com/scope-schema"
    kept = [s for s in ss.spans if s.trace_id == first]
    del ss.spans[:]
    for n, original in enumerate(kept):
        span = ss.spans.add()
        span.CopyFrom(original)
        span.trace_state = f"vendor=v{n},other=x"
        span.flags = 0x301  # sampled, parent known and remote
        span.dropped_attributes_count = 3 + n
        span.dropped_events_count = 4
        span.dropped_links_count = 5
        link = span.links.add()
        link.trace_id = bytes(range(1, 17))
        link.span_id = bytes(range(1, 9))
        link.trace_state = "linked=1"
        link.flags = 1
        link.dropped_attributes_count = 6
        link.attributes.append(KeyValue(key="link.k", value=AnyValue(string_value="v")))
    return out


@pytest.fixture(params=BACKENDS)
def store_config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {"store_url": f"sqlite:///{tmp_path}/bytes.db"}
        return
    yield {"store_url": POSTGRES_URL, "store_schema": schema_name("sj_bytes")}


def send_and_score(
    request: ExportTraceServiceRequest,
    backend: OtlpSink,
    store_config: dict[str, Any],
    judge: ScriptedJudgeServer,
    total: int,
) -> None:
    """POST the request to an enrich worker (the real OTLP/HTTP exporter towards ``backend``),
    forward what passes through, evaluate, forward the held spans with their scores."""
    config = base_config(judge, store_config["store_url"], backend.traces_url)
    config.update(
        store_config, mode="enrich", settle_seconds=SETTLE, idle_seconds=IDLE, max_hold_seconds=HOLD
    )
    clock = Clock()
    worker = Worker(load_settings(None, **config), clock=clock)
    try:
        body = request.SerializeToString()
        with TestClient(worker.app) as client:
            answer = client.post("/v1/traces", content=body, headers={"Content-Type": PROTOBUF})
        assert answer.status_code == 200
        worker.enricher.drain()
        passed = len(app_spans(backend.trace_bodies))
        assert 0 < passed < total  # the agent span is held for its bias score
        clock.now += SETTLE + 1
        worker.monitor.tick()
        worker.enricher.drain()
        assert worker.store.results(limit=100)
    finally:
        worker.shutdown(10)
        if "store_schema" in store_config:
            drop_schema(config["store_schema"])


def test_forwarded_spans_are_the_received_bytes_with_only_the_scores_appended(
    store_config: dict[str, Any], offline_judge: ScriptedJudgeServer, demo_request: Any
) -> None:
    request = enriched_request(demo_request)
    originals = {s.span_id: s for s in request.resource_spans[0].scope_spans[0].spans}
    with OtlpSink() as backend:  # keeps each trace request body as it arrived
        send_and_score(request, backend, store_config, offline_judge, len(originals))

    received = app_spans(backend.trace_bodies)
    assert sorted(s.span_id for _, _, s in received) == sorted(originals)  # each once
    scored = 0
    for rs, ss, span in received:
        original = originals[span.span_id]
        wire = original.SerializeToString()
        # the span's bytes went out as they came, contiguous, in one of the bodies
        assert any(wire in body for body in backend.trace_bodies)
        added = list(span.attributes)[len(original.attributes) :]
        assert list(span.attributes)[: len(original.attributes)] == list(original.attributes)
        again = Span()
        again.CopyFrom(span)
        del again.attributes[len(original.attributes) :]
        assert again == original  # links, trace state, flags, dropped counts: all kept
        if added:
            scored += 1
            assert all(kv.key.startswith("spanjudge.score.") for kv in added), added
            framed = Span(attributes=added).SerializeToString()
            assert any(
                wire + framed in body for body in backend.trace_bodies
            )  # appended, nothing else
        assert rs.resource == request.resource_spans[0].resource
        assert rs.schema_url == request.resource_spans[0].schema_url
        assert ss.scope == request.resource_spans[0].scope_spans[0].scope
        assert ss.schema_url == request.resource_spans[0].scope_spans[0].schema_url
    assert scored >= 1  # the agent span (bias) and the LLM span (faithfulness) carry scores


def test_a_claim_goes_out_in_requests_of_at_most_batch_size_spans_and_a_refusal_stops_it(
    tmp_path: Path, demo_request: Any
) -> None:
    """Pass-through entries of many writes are claimed together and sent in requests of at
    most ``batch_size`` spans; when the backend refuses one, the rest of the claim is given back
    untried (counted once sent and failed, not as failed)."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    from spanjudge._receive.decode import decode_protobuf
    from spanjudge._store import open_store
    from spanjudge.evaluators._enrich.forwarder import Enricher
    from tests.worker.conftest import split_request
    from tests.worker.test_enrich import FlakyBackend

    class Counting(FlakyBackend):
        def __init__(self) -> None:
            super().__init__()
            self.sizes: list[int] = []
            self.refuse_after: int | None = None

        def export(self, spans: Any) -> SpanExportResult:
            self.sizes.append(len(spans))
            if self.refuse_after is not None and len(self.sizes) > self.refuse_after:
                self.refused += len(spans)
                return SpanExportResult.FAILURE
            return super().export(spans)

    store = open_store(f"sqlite:///{tmp_path}/chunks.db")
    parts = split_request(demo_request, 6)
    sizes = [len(decode_protobuf(p.SerializeToString())) for p in parts]
    backend = Counting()
    enricher = Enricher([], store, backend, batch_size=max(sizes) + 1)  # no rule: nothing held
    clock = Clock()
    for part in parts:
        records = decode_protobuf(part.SerializeToString(), keep_bytes=True)
        store.write_spans(
            records, now=clock.now, outbox=enricher.outbox_entries(records, clock.now)
        )
    backend.refuse_after = 1
    enricher.clock = clock
    assert enricher.forward_once() == len(parts)  # one entry per write, all in one claim
    assert len(backend.sizes) == 2 and backend.sizes[0] <= max(sizes) * 2
    assert enricher.forwarded == backend.sizes[0] == len(backend.spans())
    assert enricher.failed == backend.sizes[1] == backend.refused  # only the refused request
    assert store.stats(now=clock.now).outbox_due == sum(sizes) - backend.sizes[0]
    clock.now += 120  # past the backoff
    backend.refuse_after = None
    while enricher.forward_once():
        pass
    assert sorted(f"{s.context.span_id:016x}" for s in backend.spans()) == sorted(
        r.span_id for p in parts for r in decode_protobuf(p.SerializeToString())
    )
    assert all(n <= max(sizes) * 2 for n in backend.sizes)
    store.close()


def test_a_request_stays_under_max_request_bytes_and_a_larger_entry_still_goes_alone(
    tmp_path: Path, demo_request: Any
) -> None:
    """Spans with large captured content: a request is cut at ``max_request_bytes`` as well as
    at ``batch_size`` spans; an entry larger than the limit on its own is sent alone, not held
    back. Through the real OTLP/HTTP exporter: what the backend receives is measured."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from spanjudge._receive.decode import decode_protobuf
    from spanjudge._store import open_store
    from spanjudge.evaluators._enrich.forwarder import Enricher
    from tests.worker.conftest import split_request

    store = open_store(f"sqlite:///{tmp_path}/bytes.db")
    parts = [p.SerializeToString() for p in split_request(demo_request, 6)]
    limit = max(len(p) for p in parts) * 2 + 100  # two entries fit, never three
    clock = Clock()
    with OtlpSink() as backend:
        enricher = Enricher(
            [], store, OTLPSpanExporter(endpoint=backend.traces_url), max_request_bytes=limit
        )
        enricher.clock = clock
        for body in parts:
            records = decode_protobuf(body, keep_bytes=True)
            store.write_spans(
                records, now=clock.now, outbox=enricher.outbox_entries(records, clock.now)
            )
        assert enricher.forward_once() == len(parts)
        sizes = [len(b) for b in backend.trace_bodies]
        assert len(sizes) == 3 and all(n <= limit for n in sizes), sizes
        assert enricher.forwarded == sum(len(decode_protobuf(p)) for p in parts)

        alone = open_store(f"sqlite:///{tmp_path}/alone.db")
        tiny = Enricher(
            [], alone, OTLPSpanExporter(endpoint=backend.traces_url), max_request_bytes=1
        )
        tiny.clock = clock
        for body in parts[:2]:
            records = decode_protobuf(body, keep_bytes=True)
            alone.write_spans(
                records, now=clock.now, outbox=tiny.outbox_entries(records, clock.now)
            )
        assert tiny.forward_once() == 2
        assert len(backend.trace_bodies) == 3 + 2  # each entry alone in its request
        assert tiny.forwarded == sum(len(decode_protobuf(p)) for p in parts[:2])
        alone.close()
    store.close()
