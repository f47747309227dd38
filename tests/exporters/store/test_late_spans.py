"""Late arrivals in the store (issue 30 item 3), on SQLite and PostgreSQL: a span new to a planned
trace is recorded late and the trace settles again; a new span of a planned conversation makes
it idle again; a span delivered twice, or one of our own evaluation spans, changes nothing; and a
span that arrives while its page is being planned leaves the trace to settle again."""

from __future__ import annotations

import threading
from collections.abc import Callable

from spanjudge._store.sql import SpanStore
from spanjudge.tracer import _attributes as attrs
from tests.exporters.store.test_store import SETTLE, T0, job, sid, span, tid

LATER = T0 + 100


def planned(store: SpanStore, *traces: int, now: float = LATER) -> None:
    ids = [tid(t) for t in traces]
    assert set(ids) <= set(store.settled_traces(settle_seconds=SETTLE, now=now))
    store.mark_planned(traces=ids, now=now)


def settled(store: SpanStore, now: float) -> list[str]:
    return store.settled_traces(settle_seconds=SETTLE, now=now)


def test_a_span_new_to_a_planned_trace_is_late_and_the_trace_settles_again(
    store: SpanStore,
) -> None:
    store.write_spans([span(1, 1), span(1, 2, parent=1)], now=T0)
    planned(store, 1)
    store.write_spans([span(1, 3, parent=1)], now=LATER + 5)  # the straggler

    assert store.late_spans([tid(1), tid(2)]) == {tid(1): {sid(3)}}
    assert settled(store, LATER + 5 + SETTLE - 1) == [], "it settles again, after a quiet period"
    assert settled(store, LATER + 5 + SETTLE) == [tid(1)]
    assert store.stats(now=LATER + 20).unplanned_traces == 1


def test_a_span_delivered_again_or_an_evaluation_span_changes_nothing(store: SpanStore) -> None:
    store.write_spans([span(1, 1), span(1, 2, parent=1)], now=T0)
    planned(store, 1)
    store.write_spans([span(1, 2, parent=1)], now=LATER + 5)  # a client's retry
    evaluation = span(1, 9, parent=1, attributes={attrs.GEN_AI_EVALUATION_NAME: "bias"})
    store.write_spans([evaluation], now=LATER + 6)  # our own score, sent into the trace
    store.write_spans([span(1, 1), evaluation], now=LATER + 7)  # both again, together

    assert store.late_spans([tid(1)]) == {}
    assert settled(store, LATER + 1000) == []


def test_a_retry_that_brings_one_new_span_marks_only_that_one_late(store: SpanStore) -> None:
    store.write_spans([span(1, 1), span(1, 2, parent=1)], now=T0)
    planned(store, 1)
    store.write_spans([span(1, 2, parent=1), span(1, 3, parent=1), span(2, 4)], now=LATER + 5)
    assert store.late_spans([tid(1), tid(2)]) == {tid(1): {sid(3)}}


def test_late_spans_keep_coming_until_the_trace_is_planned_again(store: SpanStore) -> None:
    store.write_spans([span(1, 1)], now=T0)
    planned(store, 1)
    store.write_spans([span(1, 2, parent=1)], now=LATER + 1)
    store.write_spans([span(1, 3, parent=1)], now=LATER + 2)  # the trace waits to settle again
    assert store.late_spans([tid(1)]) == {tid(1): {sid(2), sid(3)}}

    again = LATER + 2 + SETTLE
    assert settled(store, again) == [tid(1)]
    store.enqueue_planned([], traces=[tid(1)], replanned=[tid(1)], now=again)
    assert store.late_spans([tid(1)]) == {}
    assert settled(store, again + 1000) == []

    store.write_spans([span(1, 4, parent=1)], now=again + 1000)  # and once more
    assert store.late_spans([tid(1)]) == {tid(1): {sid(4)}}


def test_a_span_arriving_while_its_page_is_planned_leaves_the_trace_to_settle_again(
    store: SpanStore,
) -> None:
    store.write_spans([span(1, 1)], now=T0)
    store.write_spans([span(2, 2)], now=T0)
    page = settled(store, LATER)
    assert page == [tid(1), tid(2)]
    # between reading the page (and its spans) and writing its marks, trace 1 gets a span
    store.write_spans([span(1, 3, parent=1)], now=LATER)
    store.enqueue_planned(
        [job(tid(1)), job(tid(2))], traces=page, now=LATER, arrived_before=LATER - SETTLE
    )
    assert settled(store, LATER + SETTLE) == [tid(1)], "planned again with the span it missed"
    assert store.stats(now=LATER).pending == 2


def test_a_replanned_trace_left_unplanned_keeps_its_late_spans(store: SpanStore) -> None:
    store.write_spans([span(1, 1)], now=T0)
    planned(store, 1)
    store.write_spans([span(1, 2, parent=1)], now=LATER + 1)
    cutoff = LATER + 1 + SETTLE
    store.write_spans([span(1, 3, parent=1)], now=cutoff + 1)  # after the page was read
    store.enqueue_planned(
        [], traces=[tid(1)], replanned=[tid(1)], now=cutoff + 1, arrived_before=cutoff
    )
    assert store.late_spans([tid(1)]) == {tid(1): {sid(2), sid(3)}}


def test_a_new_turn_makes_a_planned_conversation_idle_again(store: SpanStore) -> None:
    store.write_spans([span(1, 1, conversation="c1")], now=T0)
    assert store.idle_conversations(idle_seconds=60, now=LATER) == ["c1"]
    store.mark_planned(conversations=["c1"], now=LATER)
    store.write_spans([span(1, 1, conversation="c1")], now=LATER + 1)  # delivered again
    assert store.idle_conversations(idle_seconds=60, now=LATER + 500) == []

    store.write_spans([span(2, 2, conversation="c1")], now=LATER + 500)  # a new turn
    assert store.idle_conversations(idle_seconds=60, now=LATER + 559) == []
    assert store.idle_conversations(idle_seconds=60, now=LATER + 560) == ["c1"]
    assert store.late_spans([tid(2)]) == {}, "the turn's own trace is new, not late"


def test_retention_forgets_late_spans(store: SpanStore) -> None:
    store.write_spans([span(1, 1)], now=T0)
    planned(store, 1)
    store.write_spans([span(1, 2, parent=1)], now=LATER)
    store.delete_older_than(LATER + 1)
    assert store.late_spans([tid(1)]) == {}


def test_a_planner_waiting_on_a_write_in_flight_sees_its_arrival(
    store_factory: Callable[[], SpanStore],
) -> None:
    writer, planner = store_factory(), store_factory()
    writer.write_spans([span(1, 1)], now=T0)
    page = settled(planner, LATER)
    marked = threading.Event()

    def plan() -> None:
        planner.enqueue_planned(
            [job(tid(1))], traces=page, now=LATER, arrived_before=LATER - SETTLE
        )
        marked.set()

    with writer.transaction() as cur:  # type: ignore[attr-defined]
        # a write in flight: the trace's row is updated (locked) and not committed yet
        cur.execute(
            writer.q("UPDATE traces SET last_arrival = ? WHERE trace_id = ?"),  # type: ignore[attr-defined]
            (LATER, tid(1)),
        )
        thread = threading.Thread(target=plan)
        thread.start()
        assert not marked.wait(0.5), "the marks wait for the write"
    thread.join(30)
    assert marked.is_set()
    assert settled(planner, LATER + SETTLE) == [tid(1)], "left to settle again, not marked"
    assert planner.stats(now=LATER).pending == 1
