"""Held spans' bytes in the shared entry of their write (migration 8), on SQLite and PostgreSQL:
a held row only points into the shared entry and is found from its span by arrival; held spans
are released one by one, some while others of the same write still wait; a re-delivered span is
not forwarded twice; a crash between the write and the forward loses nothing; retention keeps a
shared entry while a held span still needs its bytes; and version-7 rows (a held span with its
own bytes, a shared entry that is all request) are carried over by the migration and still
forwarded."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanjudge._core.otlp_wire import request_body, unframe
from spanjudge._store import sql as sql_module
from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore
from tests.exporters.store.test_outbox import HOLD, span_job
from tests.exporters.store.test_outbox_bytes import (
    ENVELOPE,
    claim,
    forwarded_spans,
    wire_span,
    with_bytes,
)
from tests.exporters.store.test_store import T0, result, sid, span, tid

OTHER = b"\x02\x0a\x00"  # another resource head (an empty Resource field) and no scope head


def outbox_rows(store: SpanStore) -> list[tuple[object, ...]]:
    """(span_id, hold, payload is stored, shared_id, piece, spans, forwarded) of every row."""
    with store.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute(
            "SELECT span_id, hold, payload IS NOT NULL, shared_id, piece, spans,"
            " forwarded_at IS NOT NULL, entry_id FROM outbox ORDER BY entry_id"
        )
        return [tuple(row) for row in cur.fetchall()]


def test_a_held_row_points_into_the_shared_entry_of_its_write(store: SpanStore) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(2, 3), span(2, 4, parent=3)]
    written = with_bytes(spans, held={sid(2), sid(4)})
    written[3].envelope = OTHER  # two resources among the held spans
    store.write_spans(spans, now=T0, outbox=written)
    rows = outbox_rows(store)
    shared = [r for r in rows if str(r[0]).startswith("batch:")]
    assert len(shared) == 1 and shared[0][2] and shared[0][5] == 2  # two pass-through spans
    held = {r[0]: r for r in rows if r[1]}
    assert set(held) == {sid(2), sid(4)}
    for row in held.values():
        assert (row[2], row[3]) == (False, shared[0][7])  # no bytes of its own: a pointer
    assert sorted(int(r[4]) for r in held.values()) == [0, 1]
    stats = store.stats(now=T0)
    assert (stats.outbox_held, stats.outbox_due) == (2, 2)
    [batch] = claim(store, T0)
    assert [s.span_id.hex() for s in forwarded_spans([batch])] == [sid(1), sid(3)]
    store.mark_forwarded([batch.entry_id], now=T0)
    items = {i.span_id: i for i in claim(store, T0 + HOLD)}
    assert set(items) == {sid(2), sid(4)}
    assert (items[sid(2)].payload, items[sid(2)].envelope) == (wire_span(spans[1]), ENVELOPE)
    assert (items[sid(4)].payload, items[sid(4)].envelope) == (wire_span(spans[3]), OTHER)
    assert all(i.hold and i.spans == 1 for i in items.values())


def test_held_spans_of_one_write_are_released_one_by_one(store: SpanStore) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(2, 3), span(2, 4, parent=3)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(2), sid(3), sid(4)}))
    store.mark_forwarded([i.entry_id for i in claim(store, T0)], now=T0)
    # trace 1 is evaluated and released; trace 2 still waits for its job
    spec = span_job(1, 2)
    store.enqueue_jobs([spec, span_job(2, 4)], now=T0 + 1)
    store.mark_planned(traces=[tid(1), tid(2)], now=T0 + 1)
    job = next(
        j
        for j in store.claim_jobs(owner="ev", limit=9, lease_seconds=60, now=T0 + 2)
        if j.span_id == sid(2)
    )
    store.complete_job(job.job_id, owner="ev", record=result(spec, score=0.5), now=T0 + 3)
    assert store.release_held(now=T0 + 4) == 2  # span 2 (scored) and span 3 (no job of its own)
    first = claim(store, T0 + 4)
    assert sorted(i.span_id for i in first) == [sid(2), sid(3)]
    scored = next(i for i in first if i.span_id == sid(2))
    assert scored.payload == wire_span(spans[1]) and [r.score for r in scored.results] == [0.5]
    assert Span.FromString(unframe(scored.payload)).span_id.hex() == sid(2)
    store.mark_forwarded([i.entry_id for i in first], now=T0 + 4)
    assert claim(store, T0 + 5) == []  # span 4 still held
    assert store.stats(now=T0 + 5).outbox_held == 1
    [last] = claim(store, T0 + HOLD)  # its hold times out: it goes out with its own bytes
    assert (last.span_id, last.payload) == (sid(4), wire_span(spans[3]))


def test_a_redelivered_held_span_gets_no_second_pointer(store: SpanStore) -> None:
    first = [span(1, 1), span(1, 2, parent=1)]
    store.write_spans(first, now=T0, outbox=with_bytes(first, held={sid(2)}))
    again = [*first, span(1, 3, parent=1)]  # a client retry with one new held span
    store.write_spans(again, now=T0 + 1, outbox=with_bytes(again, held={sid(2), sid(3)}))
    rows = outbox_rows(store)
    assert sorted(r[0] for r in rows if r[1]) == [sid(2), sid(3)]  # span 2 once
    second_shared = max(int(r[7]) for r in rows if str(r[0]).startswith("batch:"))
    assert [r[3] for r in rows if r[0] == sid(3)] == [second_shared]
    assert not any(r[5] for r in rows if r[7] == second_shared)  # nothing passes through
    items = claim(store, T0 + HOLD + 1)
    assert sorted(s.span_id.hex() for s in forwarded_spans(items)) == [sid(1), sid(2), sid(3)]


def test_a_write_of_held_spans_only_sends_no_empty_request(store: SpanStore) -> None:
    spans = [span(1, 1)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(1)}))
    assert claim(store, T0) == []  # the shared entry only keeps the bytes
    stats = store.stats(now=T0)
    assert (stats.outbox_held, stats.outbox_due) == (1, 0)
    [item] = claim(store, T0 + HOLD)
    assert item.payload == wire_span(spans[0])


def test_a_crash_between_write_and_forward_loses_nothing(
    store_factory: Callable[[], SpanStore],
) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(1, 3, parent=1)]
    before = store_factory()
    before.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(2)}))
    # the worker dies before forwarding, and again after a claim before the backend answered
    before.claim_outbox(owner="dead", limit=9, lease_seconds=30, now=T0 + HOLD)
    after = store_factory()  # a fresh process: the lease has expired
    items = after.claim_outbox(owner="new", limit=9, lease_seconds=30, now=T0 + HOLD + 31).items
    sent = forwarded_spans(items)
    assert sorted(s.span_id.hex() for s in sent) == [sid(1), sid(2), sid(3)]
    assert all(s.trace_state == "vendor=1" and s.dropped_links_count == 3 for s in sent)
    after.mark_forwarded([i.entry_id for i in items], now=T0 + HOLD + 31)
    assert claim(after, T0 + 10 * HOLD) == []


def test_retention_keeps_a_shared_entry_while_a_held_span_needs_its_bytes(
    store: SpanStore,
) -> None:
    spans = [span(1, 1), span(1, 2, parent=1)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(2)}))
    store.mark_forwarded([i.entry_id for i in claim(store, T0)], now=T0)
    store.delete_older_than(T0 + 10)  # the backend was down for longer than retention
    [held] = claim(store, T0 + HOLD)
    assert held.payload == wire_span(spans[1])  # its bytes outlived the forwarded entry
    store.mark_forwarded([held.entry_id], now=T0 + HOLD)
    store.delete_older_than(T0 + 2 * 86_400)  # (PostgreSQL: once the entries' day is past)
    assert outbox_rows(store) == []


def test_a_held_pointer_is_found_from_its_span_for_a_result_to_ride_on(
    store: SpanStore,
) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(2, 3)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(2), sid(3)}))
    later = [span(1, 4, parent=1)]  # same trace, another write (another arrival)
    store.write_spans(later, now=T0 + 1, outbox=with_bytes(later, held={sid(4)}))
    assert store.outbox_waiting(tid(1), sid(2), now=T0 + 2)
    assert store.outbox_waiting(tid(1), sid(4), now=T0 + 2)
    assert not store.outbox_waiting(tid(1), sid(1), now=T0 + 2)  # passed through
    assert not store.outbox_waiting(tid(2), sid(2), now=T0 + 2)  # no such span
    store.mark_forwarded([i.entry_id for i in claim(store, T0)], now=T0)
    items = claim(store, T0 + HOLD)
    assert not store.outbox_waiting(tid(1), sid(2), now=T0 + HOLD)  # being sent
    store.mark_forwarded([i.entry_id for i in items if i.span_id == sid(2)], now=T0 + HOLD)
    assert not store.outbox_waiting(tid(1), sid(2), now=T0 + 10 * HOLD)  # sent
    assert store.outbox_waiting(tid(1), sid(4), now=T0 + 10 * HOLD)  # lease expired: again


def test_a_write_of_more_held_spans_than_one_statement_takes_keeps_them_all(
    store: SpanStore,
) -> None:
    spans = [span(1 + n // 50, n + 1) for n in range(620)]  # over 500 held: two statements
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={s.span_id for s in spans}))
    items = claim(store, T0 + HOLD, limit=1000)
    assert sorted(i.span_id for i in items) == sorted(s.span_id for s in spans)
    assert all(
        i.payload == wire_span(s)
        for i, s in zip(
            sorted(items, key=lambda i: i.span_id),
            sorted(spans, key=lambda s: s.span_id),
            strict=True,
        )
    )


def test_a_held_span_whose_shared_entry_is_gone_is_reported_missing(store: SpanStore) -> None:
    spans = [span(1, 1), span(1, 2, parent=1)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(2)}))
    with store.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("DELETE FROM outbox WHERE span_id LIKE 'batch:%'")
    result_ = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0 + HOLD)
    assert result_.items == [] and len(result_.missing) == 1


def test_version_7_rows_are_forwarded_after_the_migration(
    store_factory: Callable[[], SpanStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(1, 3, parent=1)]
    with monkeypatch.context() as patch:
        patch.setattr(sql_module, "MIGRATIONS", sql_module.MIGRATIONS[:7])
        old = store_factory()
        assert old.schema_version() == 7
        old.write_spans(spans, now=T0)
        body = zlib.compress(request_body([(ENVELOPE, wire_span(s)) for s in spans[::2]]), 1)
        with old.transaction() as cur:  # type: ignore[attr-defined]
            cur.execute(  # the version-7 rows: a shared entry, a held span with its bytes
                old.q(  # type: ignore[attr-defined]
                    "INSERT INTO outbox (trace_id, span_id, hold, release_at, payload, envelope,"
                    " spans) VALUES (?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?)"
                ),
                ("", "batch:v7", 0, T0, body, None, 2)  # noqa: RUF005 - two rows
                + (tid(1), sid(2), 1, T0 + HOLD, wire_span(spans[1]), ENVELOPE, 1),
            )
    new = store_factory()
    assert new.schema_version() == SCHEMA_VERSION >= 8
    assert new.outbox_waiting(tid(1), sid(2), now=T0)  # found from its span after the copy
    [batch] = claim(new, T0)
    assert [s.span_id.hex() for s in forwarded_spans([batch])] == [sid(1), sid(3)]
    new.mark_forwarded([batch.entry_id], now=T0)
    [held] = claim(new, T0 + HOLD)
    assert (held.payload, held.envelope, held.hold) == (wire_span(spans[1]), ENVELOPE, True)
    # and new writes beside them use the shared shape
    more = [span(2, 4), span(2, 5, parent=4)]
    new.write_spans(more, now=T0 + 1, outbox=with_bytes(more, held={sid(5)}))
    assert [r[3] is not None for r in outbox_rows(new) if r[0] == sid(5)] == [True]
