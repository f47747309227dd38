"""What enrich mode sends downstream: claimed outbox items cut into OTLP requests and each
request's body, built from the bytes the spans arrived with.

A request holds at most ``max_spans`` spans and :data:`MAX_REQUEST_BYTES`; a held span goes
out with its scores appended to its own bytes as attributes, pass-through spans as the request
body they were stored in, and a span stored without bytes is rebuilt and encoded.

Example::

    while items:
        end, spans = request_end(items, max_spans=2048, max_bytes=MAX_REQUEST_BYTES)
        send(request_of(items[:end]))
        items = items[end:]
"""

from __future__ import annotations

from collections.abc import Sequence

from spanjudge._core.otlp_wire import frame, request_body, unframe, with_attributes
from spanjudge._store.models import OutboxItem
from spanjudge.exporters._convert import to_readable_span
from spanjudge.exporters._emit.evaluation_result import score_attributes

# Bytes of one forwarded request at most (before compression): 4 MiB, the smallest common
# limit among OTLP receivers (gRPC's default message size; the Collector's HTTP receiver takes
# 20 MiB). A batch of spans with captured prompts and answers can weigh far more than that.
MAX_REQUEST_BYTES = 4 * 1024 * 1024
# What a span stored without its bytes is counted as (it is encoded again when sent).
_REBUILT_BYTES = 1024


def request_end(items: Sequence[OutboxItem], *, max_spans: int, max_bytes: int) -> tuple[int, int]:
    """How many of ``items`` go in the next request, and their spans: at most ``max_spans``
    spans and ``max_bytes`` (one item always goes, whatever its size)."""
    count = size = end = 0
    while end < len(items) and count < max_spans:
        item = items[end]
        size += len(item.payload or b"") + len(item.envelope or b"") or _REBUILT_BYTES
        if end and size > max_bytes:
            break
        count += item.spans
        end += 1
    return end, count


def request_of(items: Sequence[OutboxItem]) -> bytes:
    """One serialized OTLP request of the items' spans: bytes as received, a held span's
    scores appended as attributes; entries stored without bytes are rebuilt and encoded."""
    held: list[tuple[bytes, bytes]] = []
    bodies: list[bytes] = []
    rebuilt = []
    for item in items:
        extra = score_attributes(item.results) if item.results else {}
        if item.payload is None:
            if item.span is not None:
                rebuilt.append(to_readable_span(item.span, extra))
        elif item.envelope is None:
            bodies.append(item.payload)  # pass-through spans, a request body already
        else:
            held.append((item.envelope, frame(with_attributes(unframe(item.payload), extra))))
    if rebuilt:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        bodies.append(encode_spans(rebuilt).SerializeToString())
    # serialized requests concatenate into one request holding all their spans
    return request_body(held) + b"".join(bodies)
