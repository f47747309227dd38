"""The enrich-mode outbox, on SQLite and PostgreSQL: written with the spans, once per span,
released when evaluations are over, claimed by one forwarder at a time, kept until sent."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from spanjudge._store import sql as sql_module
from spanjudge._store.models import JobSpec, OutboxEntry
from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore
from tests.exporters.store.test_store import T0, result, sid, span, tid

HOLD = 120.0


def entries(spans: list, held: set[str] = frozenset(), now: float = T0) -> list[OutboxEntry]:  # type: ignore[assignment]
    return [
        OutboxEntry(
            s.trace_id, s.span_id, s.span_id in held, now + HOLD if s.span_id in held else now
        )
        for s in spans
    ]


def claim_ids(store: SpanStore, now: float, owner: str = "w1", limit: int = 100) -> list[str]:
    claim = store.claim_outbox(owner=owner, limit=limit, lease_seconds=30, now=now)
    return sorted(item.span.span_id for item in claim.items)


def span_job(trace: int, n: int, rule: str = "faith") -> JobSpec:
    return JobSpec(
        rule=rule,
        target_type="llm",
        target_id=sid(n),
        trace_id=tid(trace),
        span_id=sid(n),
        sample_rate=1.0,
    )


def test_pass_through_spans_are_due_at_once_and_held_ones_wait(store: SpanStore) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(1, 3, parent=1)]
    store.write_spans(spans, now=T0, outbox=entries(spans, held={sid(2)}))
    claim = store.claim_outbox(owner="w1", limit=10, lease_seconds=30, now=T0)
    assert sorted(i.span.span_id for i in claim.items) == [sid(1), sid(3)]
    assert all(not i.hold and i.results == [] for i in claim.items)
    assert claim.items[0].span == store.trace_spans(tid(1))[0]  # the full stored span
    stats = store.stats(now=T0)
    assert (stats.outbox_held, stats.outbox_due) == (1, 2)
    store.mark_forwarded([i.entry_id for i in claim.items], now=T0)
    assert claim_ids(store, T0 + 1) == []  # forwarded once, never again
    # the hold times out: the span goes out without scores
    assert claim_ids(store, T0 + HOLD - 1) == []
    assert claim_ids(store, T0 + HOLD) == [sid(2)]


def test_a_redelivered_span_gets_no_second_entry(store: SpanStore) -> None:
    spans = [span(1, 1)]
    store.write_spans(spans, now=T0, outbox=entries(spans))
    claim = store.claim_outbox(owner="w1", limit=10, lease_seconds=30, now=T0)
    store.mark_forwarded([i.entry_id for i in claim.items], now=T0)
    # a client retry of the same batch (it never saw our 200) must not forward it again
    store.write_spans(spans, now=T0 + 5, outbox=entries(spans, now=T0 + 5))
    assert claim_ids(store, T0 + 10) == []
    assert store.stats(now=T0 + 10).outbox_due == 0


def test_held_span_is_released_only_when_its_evaluations_are_over(store: SpanStore) -> None:
    spans = [span(1, 1), span(1, 2, parent=1)]
    store.write_spans(spans, now=T0, outbox=entries(spans, held={sid(2)}))
    store.mark_forwarded(
        [
            i.entry_id
            for i in store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0).items
        ],
        now=T0,
    )
    assert store.release_held(now=T0 + 1) == 0  # trace not planned yet
    spec = span_job(1, 2)
    store.enqueue_jobs([spec], now=T0 + 11)
    store.mark_planned(traces=[tid(1)], now=T0 + 11)
    assert store.release_held(now=T0 + 12) == 0  # its job is pending
    (job,) = store.claim_jobs(owner="ev", limit=5, lease_seconds=60, now=T0 + 12)
    assert store.release_held(now=T0 + 13) == 0  # ... and then leased
    record = result(spec, score=0.25)
    assert store.complete_job(job.job_id, owner="ev", record=record, now=T0 + 14)
    assert store.release_held(now=T0 + 15) == 1
    claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0 + 15)
    (item,) = claim.items
    assert item.span.span_id == sid(2) and item.hold
    assert [r.score for r in item.results] == [0.25]  # its own results come with it
    assert store.release_held(now=T0 + 16) == 0


def test_a_planned_trace_without_a_job_for_the_span_releases_it(store: SpanStore) -> None:
    """A budget refused the job, or the rule did not pick it after all: no wait for nothing."""
    spans = [span(1, 1)]
    store.write_spans(spans, now=T0, outbox=entries(spans, held={sid(1)}))
    store.mark_planned(traces=[tid(1)], now=T0 + 11)
    assert store.release_held(now=T0 + 12) == 1
    assert claim_ids(store, T0 + 12) == [sid(1)]


def test_conversation_jobs_do_not_hold_the_span_they_attach_to(store: SpanStore) -> None:
    spans = [span(1, 1, conversation="c1")]
    store.write_spans(spans, now=T0, outbox=entries(spans, held={sid(1)}))
    conv = JobSpec(
        rule="topics", target_type="conversation", target_id="c1", trace_id=tid(1), span_id=sid(1)
    )
    store.enqueue_jobs([conv], now=T0 + 11)
    store.mark_planned(traces=[tid(1)], now=T0 + 11)
    assert store.release_held(now=T0 + 12) == 1


def test_results_of_other_spans_and_conversations_do_not_ride_along(store: SpanStore) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(1, 3, parent=1, conversation="c")]
    store.write_spans(spans, now=T0, outbox=entries(spans, held={sid(2), sid(3)}))
    specs = [
        span_job(1, 2),
        span_job(1, 3, rule="other"),
        JobSpec(
            rule="topics",
            target_type="conversation",
            target_id="c",
            trace_id=tid(1),
            span_id=sid(2),
        ),
    ]
    store.enqueue_jobs(specs, now=T0 + 1)
    for job in store.claim_jobs(owner="ev", limit=9, lease_seconds=60, now=T0 + 1):
        spec = next(s for s in specs if s.rule == job.rule)
        store.complete_job(job.job_id, owner="ev", record=result(spec, score=0.5), now=T0 + 2)
    claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0 + HOLD)
    by_span = {i.span.span_id: [r.rule for r in i.results] for i in claim.items}
    assert by_span == {sid(1): [], sid(2): ["faith"], sid(3): ["other"]}


def test_failed_forward_is_retried_after_the_backoff(store: SpanStore) -> None:
    spans = [span(1, 1)]
    store.write_spans(spans, now=T0, outbox=entries(spans))
    claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0)
    assert claim_ids(store, T0 + 1) == []  # leased
    store.retry_outbox([i.entry_id for i in claim.items], retry_at=T0 + 5)
    assert claim_ids(store, T0 + 4) == []
    again = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0 + 5)
    assert [i.attempts for i in again.items] == [2]
    # an expired lease (a forwarder that died) is claimed again too
    assert claim_ids(store, T0 + 36) == [sid(1)]


def test_outbox_waiting_tells_whether_a_result_can_still_ride(store: SpanStore) -> None:
    spans = [span(1, 1)]
    store.write_spans(spans, now=T0, outbox=entries(spans, held={sid(1)}))
    assert store.outbox_waiting(tid(1), sid(1), now=T0)
    assert not store.outbox_waiting(tid(1), sid(9), now=T0)  # no entry
    claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0 + HOLD)
    assert not store.outbox_waiting(tid(1), sid(1), now=T0 + HOLD)  # being sent right now
    store.retry_outbox([i.entry_id for i in claim.items], retry_at=T0 + HOLD + 5)
    assert store.outbox_waiting(tid(1), sid(1), now=T0 + HOLD + 1)  # will be read again
    again = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0 + HOLD + 5)
    store.mark_forwarded([i.entry_id for i in again.items], now=T0 + HOLD + 5)
    assert not store.outbox_waiting(tid(1), sid(1), now=T0 + HOLD + 6)


def test_span_deleted_by_retention_is_reported_missing(store: SpanStore) -> None:
    spans = [span(1, 1), span(2, 2)]
    store.write_spans(spans[:1], now=T0, outbox=entries(spans[:1], now=T0))
    store.write_spans(spans[1:], now=T0 + 100, outbox=entries(spans[1:], now=T0 + 100))
    store.delete_older_than(T0 + 50)
    claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=T0 + 100)
    assert [i.span.span_id for i in claim.items] == [sid(2)]
    assert len(claim.missing) == 1
    store.mark_forwarded([*claim.missing, *(i.entry_id for i in claim.items)], now=T0 + 100)
    # forwarded entries go with retention too (PostgreSQL: once their whole day is past)
    store.delete_older_than(T0 + 2 * 86_400)
    with store.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT COUNT(*) FROM outbox")
        assert cur.fetchone()[0] == 0


def test_concurrent_forwarders_never_claim_the_same_entry(
    store_factory: Callable[[], SpanStore],
) -> None:
    first = store_factory()
    spans = [span(1 + n // 10, n + 1) for n in range(300)]
    first.write_spans(spans, now=T0, outbox=entries(spans))
    claimed: list[list[str]] = [[], [], []]
    stores = [first, store_factory(), store_factory()]
    barrier = threading.Barrier(3)

    def forward(k: int) -> None:
        barrier.wait()
        while True:
            claim = stores[k].claim_outbox(owner=f"w{k}", limit=25, lease_seconds=30, now=T0)
            if not claim.items:
                return
            claimed[k].extend(i.span.span_id for i in claim.items)
            stores[k].mark_forwarded([i.entry_id for i in claim.items], now=T0)

    threads = [threading.Thread(target=forward, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    everything = [s for part in claimed for s in part]
    assert sorted(everything) == sorted(s.span_id for s in spans)  # each exactly once


def test_a_version_one_database_gains_the_outbox(
    store_factory: Callable[[], SpanStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(sql_module, "MIGRATIONS", sql_module.MIGRATIONS[:1])
        old = store_factory()
        assert old.schema_version() == 1
        old.write_spans([span(1, 1)], now=T0)
    new = store_factory()
    assert new.schema_version() == SCHEMA_VERSION >= 2
    spans = [span(1, 2, parent=1)]
    new.write_spans(spans, now=T0, outbox=entries(spans))
    assert claim_ids(new, T0) == [sid(2)]
