"""The outbox with spans' bytes as received (migration 7), on SQLite and PostgreSQL:
pass-through spans of one write share one entry holding their request body, held spans keep
their own bytes, a re-delivered span is recognised inside the write (also by a concurrent
writer on PostgreSQL), and entries written before version 7 still go out."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanjudge._core.otlp_wire import unframe
from spanjudge._core.span_record import SpanRecord
from spanjudge._store import sql as sql_module
from spanjudge._store.models import OutboxEntry, OutboxItem
from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore
from tests.exporters.store.test_outbox import HOLD, entries
from tests.exporters.store.test_store import T0, sid, span, tid

ENVELOPE = b"\x00"  # an empty resource head and scope head (see otlp_wire.split_request)


def wire_span(record: SpanRecord) -> bytes:
    """The record as a framed protobuf Span (the bytes the receiver keeps)."""
    message = Span(
        trace_id=bytes.fromhex(record.trace_id),
        span_id=bytes.fromhex(record.span_id),
        name=record.name,
        trace_state="vendor=1",
        dropped_links_count=3,
    )
    body = message.SerializeToString()
    return bytes([0x12, len(body)]) + body


def with_bytes(spans: list[SpanRecord], held: set[str] = frozenset()) -> list[OutboxEntry]:  # type: ignore[assignment]
    out = entries(spans, held)
    for entry, record in zip(out, spans, strict=True):
        entry.span, entry.envelope = wire_span(record), ENVELOPE
    return out


def claim(store: SpanStore, now: float, limit: int = 100) -> list[OutboxItem]:
    return store.claim_outbox(owner="w", limit=limit, lease_seconds=30, now=now).items


def forwarded_spans(items: list[OutboxItem]) -> list[Span]:
    """What each item sends: a held span's message, or every span of a pass-through body."""
    out = []
    for item in items:
        assert item.payload is not None
        if item.envelope is not None:
            out.append(Span.FromString(unframe(item.payload)))
        else:
            request = ExportTraceServiceRequest.FromString(item.payload)
            out.extend(
                s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
            )
    return out


def test_pass_through_spans_share_one_entry_and_held_ones_keep_their_bytes(
    store: SpanStore,
) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(2, 3), span(2, 4, parent=3)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(2)}))
    stats = store.stats(now=T0)
    assert (stats.outbox_held, stats.outbox_due) == (1, 3)  # counted in spans, not entries
    [batch] = claim(store, T0)
    assert (batch.spans, batch.hold, batch.envelope, batch.span) == (3, False, None, None)
    sent = forwarded_spans([batch])
    assert [s.span_id.hex() for s in sent] == [sid(1), sid(3), sid(4)]
    assert all(s.trace_state == "vendor=1" and s.dropped_links_count == 3 for s in sent)
    store.mark_forwarded([batch.entry_id], now=T0)
    [held] = claim(store, T0 + HOLD)
    assert (held.hold, held.trace_id, held.span_id, held.envelope) == (
        True,
        tid(1),
        sid(2),
        ENVELOPE,
    )
    assert held.payload == wire_span(spans[1])


def test_a_redelivered_span_is_not_forwarded_again(store: SpanStore) -> None:
    first = [span(1, 1), span(1, 2, parent=1)]
    store.write_spans(first, now=T0, outbox=with_bytes(first, held={sid(2)}))
    again = [*first, span(1, 5, parent=1)]  # a retried batch with one new span
    store.write_spans(again, now=T0 + 1, outbox=with_bytes(again, held={sid(2)}))
    items = claim(store, T0 + HOLD + 1)
    ids = sorted(s.span_id.hex() for s in forwarded_spans(items))
    assert ids == sorted([sid(1), sid(2), sid(5)])  # each once
    store.mark_forwarded([i.entry_id for i in items], now=T0 + HOLD + 1)
    stats = store.stats(now=T0 + HOLD + 1)
    assert (stats.outbox_held, stats.outbox_due) == (0, 0)


def test_a_span_twice_in_one_request_goes_out_once(store: SpanStore) -> None:
    spans = [span(1, 1), span(1, 1)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans))
    assert [s.span_id.hex() for s in forwarded_spans(claim(store, T0))] == [sid(1)]


def test_concurrent_writers_of_the_same_spans_forward_them_once(
    store_factory: Callable[[], SpanStore],
) -> None:
    """Two workers get the same batch at once (a Collector retry to another worker): the
    write that stored a span first is the one whose entry sends it."""
    stores = [store_factory() for _ in range(4)]
    spans = [span(1 + n // 5, n + 1) for n in range(40)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def write(k: int) -> None:
        barrier.wait()
        try:
            stores[k].write_spans(spans, now=T0, outbox=with_bytes(spans))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    ids = [s.span_id.hex() for s in forwarded_spans(claim(stores[0], T0))]
    assert sorted(ids) == sorted(s.span_id for s in spans)  # each exactly once


def test_entries_written_before_version_7_are_rebuilt_from_the_spans(
    store_factory: Callable[[], SpanStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(sql_module, "MIGRATIONS", sql_module.MIGRATIONS[:6])
        old = store_factory()
        assert old.schema_version() == 6
        spans = [span(1, 1), span(1, 2, parent=1)]
        old.write_spans(spans, now=T0)
        with old.transaction() as cur:  # type: ignore[attr-defined]
            for n, hold in ((1, 0), (2, 1)):  # the version 2-6 outbox row
                cur.execute(
                    old.q(  # type: ignore[attr-defined]
                        "INSERT INTO outbox (trace_id, span_id, hold, release_at)"
                        " VALUES (?, ?, ?, ?)"
                    ),
                    (tid(1), sid(n), hold, T0 + HOLD * hold),
                )
    new = store_factory()
    assert new.schema_version() == SCHEMA_VERSION
    items = claim(new, T0 + HOLD)
    assert [(i.payload, i.span.span_id if i.span else None) for i in items] == [
        (None, sid(1)),
        (None, sid(2)),
    ]
