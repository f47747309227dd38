"""Spans at the wire level: each span's bytes as received, requests put together from them,
attributes appended; checked against the official proto classes."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanjudge._core.otlp_wire import (
    frame,
    indexed_request_body,
    request_body,
    split_request,
    unframe,
    with_attributes,
)
from spanjudge._receive.decode import OtlpDecodeError, decode_json, decode_protobuf


def request() -> ExportTraceServiceRequest:
    """Two resources, one with two scopes; links, trace state, dropped counts, schema URLs."""
    out = ExportTraceServiceRequest()
    for r in range(2):
        rs = out.resource_spans.add(schema_url=f"https://schema/{r}")
        rs.resource.attributes.append(
            KeyValue(key="service.name", value=AnyValue(string_value=f"s{r}"))
        )
        rs.resource.dropped_attributes_count = r
        for c in range(r + 1):
            ss = rs.scope_spans.add(schema_url=f"https://scope/{c}")
            ss.scope.name, ss.scope.version = f"lib{c}", "1.0"
            for n in range(2):
                span = ss.spans.add(
                    trace_id=bytes([r + 1] * 16),
                    span_id=bytes([r + 1, c + 1, n + 1] + [9] * 5),
                    name=f"span {r}.{c}.{n}",
                    trace_state="k=v",
                    flags=0x101,
                    dropped_links_count=n,
                )
                span.links.add(trace_id=bytes([7] * 16), span_id=bytes([8] * 8), trace_state="l=1")
    return out


def flat(req: ExportTraceServiceRequest) -> list[Span]:
    return [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def triples(req: ExportTraceServiceRequest) -> list[tuple[bytes, bytes, bytes]]:
    return [
        (
            rs.resource.SerializeToString() + rs.schema_url.encode(),
            ss.scope.SerializeToString() + ss.schema_url.encode(),
            s.SerializeToString(),
        )
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]


def test_each_span_is_its_bytes_as_received_and_the_request_comes_back_whole() -> None:
    req = request()
    wire = split_request(req.SerializeToString())
    assert [unframe(w.span) for w in wire] == [s.SerializeToString() for s in flat(req)]
    assert len({w.envelope for w in wire}) == 3  # one per scope
    body = request_body((w.envelope, w.span) for w in wire)
    # every span with its resource and scope (each scope in its own ResourceSpans)
    assert triples(ExportTraceServiceRequest.FromString(body)) == triples(req)


def test_a_subset_keeps_each_span_with_its_own_resource_and_scope() -> None:
    req = request()
    wire = split_request(req.SerializeToString())
    some = [wire[5], wire[0]]
    again = ExportTraceServiceRequest.FromString(request_body((w.envelope, w.span) for w in some))
    got = {
        s.name: (rs.resource, rs.schema_url, ss.scope, ss.schema_url)
        for rs in again.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }
    expected = {
        s.name: (rs.resource, rs.schema_url, ss.scope, ss.schema_url)
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }
    assert got == {name: expected[name] for name in ("span 0.0.0", "span 1.1.1")}


def test_attributes_are_appended_after_the_span_s_own_bytes() -> None:
    span = flat(request())[0]
    span.attributes.append(KeyValue(key="own", value=AnyValue(int_value=1)))
    raw = span.SerializeToString()
    extra = {
        "spanjudge.score.bias.value": 0.25,
        "spanjudge.score.bias.success": True,
        "spanjudge.score.bias.label": "pass",
        "spanjudge.score.x.count": 3,
        "spanjudge.score.x.list": ["a"],
    }
    out = with_attributes(raw, extra)
    assert out.startswith(raw)
    parsed = Span.FromString(out)
    assert [kv.key for kv in parsed.attributes] == ["own", *extra]
    assert parsed.attributes[1].value.double_value == 0.25
    assert parsed.attributes[2].value.bool_value is True
    assert parsed.attributes[5].value.array_value.values[0].string_value == "a"
    assert parsed.links == span.links and parsed.trace_state == "k=v"
    assert with_attributes(raw, {}) == raw
    assert unframe(frame(out)) == out


def test_an_attribute_the_span_already_has_is_replaced_not_doubled() -> None:
    span = flat(request())[0]
    span.attributes.append(
        KeyValue(key="spanjudge.score.bias.value", value=AnyValue(double_value=1))
    )
    out = Span.FromString(
        with_attributes(span.SerializeToString(), {"spanjudge.score.bias.value": 0.5})
    )
    assert [(kv.key, kv.value.double_value) for kv in out.attributes] == [
        ("spanjudge.score.bias.value", 0.5)
    ]
    with pytest.raises(TypeError, match="not an OTel attribute type"):
        with_attributes(span.SerializeToString(), {"k": object()})


def test_unknown_fields_and_groups_from_a_newer_sender_travel_along() -> None:
    req = request()
    body = bytearray(req.SerializeToString())
    # an unknown varint field 99 and an unknown group 98 at the request's top level, and an
    # unknown field 50 inside the first span (kept inside its bytes)
    body += bytes([0x98, 0x06, 0x05]) + bytes([0x93, 0x06, 0x08, 0x01, 0x94, 0x06])
    wire = split_request(bytes(body))
    assert len(wire) == len(flat(req))
    span_bytes = flat(req)[0].SerializeToString() + bytes([0x90, 0x03, 0x07])
    first = req.resource_spans[0].scope_spans[0]
    first.spans[0].ParseFromString(span_bytes)
    wire = split_request(req.SerializeToString())
    assert unframe(wire[0].span) == span_bytes


def test_the_decoder_keeps_the_bytes_of_the_spans_it_accepted() -> None:
    req = request()
    flat(req)[1].span_id = b""  # invalid: rejected alone
    rejected: list[str] = []
    records = decode_protobuf(req.SerializeToString(), rejected=rejected, keep_bytes=True)
    assert len(rejected) == 1 and len(records) == len(flat(req)) - 1
    wire = records.wire  # type: ignore[attr-defined]
    assert [Span.FromString(unframe(w.span)).name for w in wire] == [r.name for r in records]
    assert not hasattr(decode_protobuf(request().SerializeToString()), "wire")


def test_json_bodies_get_their_protobuf_bytes() -> None:
    body = (
        b'{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{"name":"x"},"spans":[{'
        b'"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",'
        b'"name":"n","traceState":"a=b","droppedLinksCount":2}]}]}]}'
    )
    [record] = records = decode_json(body, keep_bytes=True)
    span = Span.FromString(unframe(records.wire[0].span))  # type: ignore[attr-defined]
    assert (span.name, span.trace_state, span.dropped_links_count) == ("n", "a=b", 2)
    assert record.span_id == "0102030405060708"
    with pytest.raises(OtlpDecodeError):
        decode_json(b"[]", keep_bytes=True)


def test_indexed_request_body_says_where_each_span_lands() -> None:
    """Spans sharing an envelope are grouped: the places given are the order split_request
    lists them in, so a held row's piece finds its own span again."""
    first, second = b"\x00", b"\x02\x0a\x00"
    pairs = [
        (first, frame(Span(name="a").SerializeToString())),
        (second, frame(Span(name="b").SerializeToString())),
        (first, frame(Span(name="c").SerializeToString())),
    ]
    body, places = indexed_request_body(pairs)
    assert body == request_body(pairs)
    listed = split_request(body)
    assert places == [0, 2, 1]
    for (envelope, span), place in zip(pairs, places, strict=True):
        assert (listed[place].envelope, listed[place].span) == (envelope, span)
    assert indexed_request_body([]) == (b"", [])


def test_spans_of_every_length_size_are_split_as_sent() -> None:
    """A span's length is a varint of one, two or three bytes (under 128 bytes, under 16 KiB,
    above): each comes back as its own bytes, in order."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for size in (0, 100, 5_000, 40_000):
        span = scope.spans.add(name="s", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
        if size:
            span.attributes.append(KeyValue(key="k", value=AnyValue(string_value="x" * size)))
    body = request.SerializeToString()
    wire = split_request(body)
    assert [Span.FromString(unframe(w.span)) for w in wire] == list(scope.spans)
    assert [len(w.span) - len(unframe(w.span)) for w in wire] == [2, 3, 3, 4]  # key + length
    assert request_body([(w.envelope, w.span) for w in wire]) == body
