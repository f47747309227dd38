"""The receiver's screen: spans of traces it does not want are not decoded nor handed to the
sink, yet counted as received; malformed ids are still refused by the decoder (OTLP partial
success) and a screen that fails or meets garbage never turns a request into an error."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from starlette.testclient import TestClient

from spanjudge._core import metric_names as names
from spanjudge._core.telemetry import Telemetry
from spanjudge._receive.receiver import create_receiver_app
from tests.exporters.receiver.conftest import ListSink, json_body, make_sdk_spans
from tests.support.metrics import labelled_values

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


class Screen:
    """Wants the traces listed; counts what it was asked and what was passed over."""

    def __init__(self, wanted: set[bytes], fail: bool = False) -> None:
        self.wanted_ids = wanted
        self.fail = fail
        self.asked = 0
        self.passed = 0

    def wanted(self, trace_id: bytes, trace_state: str = "") -> bool:
        self.asked += 1
        if self.fail:
            raise RuntimeError("screen broke")
        return trace_id in self.wanted_ids

    def passed_over(self, count: int) -> None:
        self.passed += count


def two_traces() -> Any:
    """Two SDK-made traces (root and LLM child each) in one request."""
    request = encode_spans([*make_sdk_spans(), *make_sdk_spans()])
    ids = {s.trace_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert len(ids) == 2
    return request, sorted(ids)


def spans_of(request: Any) -> list[Any]:
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def test_spans_of_unwanted_traces_never_reach_the_sink_but_count_as_received() -> None:
    request, (kept, _) = two_traces()
    sink, screen = ListSink(), Screen({kept})
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    app = create_receiver_app(sink=sink, screen=screen, telemetry=telemetry)
    response = TestClient(app).post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert response.status_code == 200
    assert (
        ExportTraceServiceResponse.FromString(response.content).partial_success.rejected_spans == 0
    )
    assert {r.trace_id for r in sink.records} == {kept.hex()}
    assert len(sink.records) == 2 and screen.passed == 2
    received = labelled_values(reader)[names.RECEIVER_SPANS]
    assert received[(("encoding", "protobuf"),)] == 4


def test_json_bodies_are_screened_the_same_way() -> None:
    body = json.loads(json_body(make_sdk_spans()))
    sink = ListSink()
    only = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    screen = Screen({bytes.fromhex(only)})
    app = create_receiver_app(sink=sink, screen=screen)
    assert TestClient(app).post("/v1/traces", content=json.dumps(body), headers=JS).json() == {}
    assert {r.trace_id for r in sink.records} == {only}
    nobody = Screen(set())
    sink2 = ListSink()
    app2 = create_receiver_app(sink=sink2, screen=nobody)
    assert (
        TestClient(app2).post("/v1/traces", content=json.dumps(body), headers=JS).status_code == 200
    )
    assert sink2.batches == [] and nobody.passed == 2  # nothing to store: the sink is not called


def test_malformed_ids_still_rejected_by_the_decoder_when_screened() -> None:
    request, (kept, _) = two_traces()
    ss = request.resource_spans[0].scope_spans[0]
    ss.spans.add(trace_id=b"\0" * 16, span_id=b"\1" * 8, name="zero id")
    ss.spans.add(trace_id=b"\1" * 3, span_id=b"\1" * 8, name="short id")

    class WantsOdd(Screen):
        def wanted(self, trace_id: bytes, trace_state: str = "") -> bool:  # odd ids decoded
            return len(trace_id) != 16 or not any(trace_id) or trace_id in self.wanted_ids

    sink = ListSink()
    app = create_receiver_app(sink=sink, screen=WantsOdd({kept}))
    response = TestClient(app).post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 2
    assert {r.trace_id for r in sink.records} == {kept.hex()}


def test_a_failing_screen_decodes_everything() -> None:
    request, _ = two_traces()
    sink = ListSink()
    screen = Screen(set(), fail=True)
    app = create_receiver_app(sink=sink, screen=screen)
    response = TestClient(app).post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert response.status_code == 200
    assert len(sink.records) == 4 and screen.asked >= 1 and screen.passed == 0


def test_trace_state_garbage_and_odd_bodies_answer_as_without_a_screen() -> None:
    request, (kept, _) = two_traces()
    for span in spans_of(request):
        span.trace_state = "ot=th:zz;rv:nothex,,=,"
    sink = ListSink()
    app = create_receiver_app(sink=sink, screen=Screen({kept}))
    client = TestClient(app)
    assert (
        client.post("/v1/traces", content=request.SerializeToString(), headers=PB).status_code
        == 200
    )
    assert {r.trace_id for r in sink.records} == {kept.hex()}
    # malformed bodies: 400 as before, the screen never asked
    screen = Screen({kept})
    app = create_receiver_app(sink=ListSink(), screen=screen)
    client = TestClient(app)
    assert client.post("/v1/traces", content=b"\xff\x00garbage", headers=PB).status_code == 400
    assert client.post("/v1/traces", content=b"{not json", headers=JS).status_code == 400
    assert screen.asked == 0


def test_enrich_bodies_are_never_screened() -> None:
    request, (kept, _) = two_traces()
    sink = ListSink()
    screen = Screen({kept})
    app = create_receiver_app(sink=sink, screen=screen, keep_span_bytes=True)
    response = TestClient(app).post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert response.status_code == 200
    assert len(sink.records) == 4 and screen.asked == 0  # forwarded as received: all of them


def test_spans_passed_over_count_only_once_the_request_succeeds() -> None:
    request, (kept, _) = two_traces()

    def failing(records: list[Any]) -> None:
        raise RuntimeError("store down")

    screen = Screen({kept})
    app = create_receiver_app(sink=failing, screen=screen)
    response = TestClient(app).post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert response.status_code >= 500
    assert screen.passed == 0  # the client sends them again: counted when that succeeds
