"""Planning writes a page at a time: a page's jobs and its "planned" marks go in one
transaction (one UPDATE per kind for the marks, not one per trace), and a crash between the jobs
and the marks loses neither: both roll back, the page stays settled and is planned again. A page
of traces' spans is read at once. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from spanjudge._store import spans as spans_module
from spanjudge._store.models import JobSpec
from spanjudge._store.sql import SpanStore
from tests.exporters.store.test_store import SETTLE, T0, job, sid, span, tid


class CountingCursor:
    """A cursor that notes every statement it runs (an ``executemany`` once per row)."""

    def __init__(self, cursor: Any, log: list[str]) -> None:
        self._cursor = cursor
        self._log = log

    def execute(self, sql: Any, params: Any = None) -> Any:
        self._log.append(str(sql))
        return self._cursor.execute(sql, params)

    def executemany(self, sql: Any, params: Any) -> Any:
        rows = list(params)
        self._log.extend(str(sql) for _ in rows)
        return self._cursor.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def count_statements(store: SpanStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Patch ``store`` so its transactions and statements are noted."""
    seen: dict[str, Any] = {"transactions": 0, "statements": []}
    real = store.transaction  # type: ignore[attr-defined]

    @contextmanager
    def transaction(*, write: bool = True) -> Iterator[Any]:
        seen["transactions"] += 1
        with real(write=write) as cur:
            yield CountingCursor(cur, seen["statements"])

    monkeypatch.setattr(store, "transaction", transaction)
    return seen


def settled_page(store: SpanStore, n: int) -> list[str]:
    store.write_spans([span(i, i) for i in range(1, n + 1)], now=T0)
    page = store.settled_traces(settle_seconds=SETTLE, now=T0 + 100, limit=n)
    assert len(page) == n
    return page


def test_a_page_of_traces_is_marked_planned_with_its_jobs_in_one_transaction(
    store: SpanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = settled_page(store, 300)
    seen = count_statements(store, monkeypatch)
    new = store.enqueue_planned([job(t) for t in page], traces=page, now=T0 + 100)
    assert new == 300
    assert seen["transactions"] == 1
    updates = [s for s in seen["statements"] if s.lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 1, "one UPDATE for the whole page, not one per trace"
    monkeypatch.undo()
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 200) == []
    assert store.stats(now=T0 + 200).pending == 300


def test_mark_planned_is_one_statement_per_page_and_kind(
    store: SpanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = settled_page(store, 120)
    for n in range(3):
        store.write_spans([span(1000 + n, 1000 + n, conversation=f"c{n}")], now=T0)
    seen = count_statements(store, monkeypatch)
    store.mark_planned(traces=page, conversations=["c0", "c1", "c2"], now=T0 + 100)
    assert seen["transactions"] == 1
    assert len(seen["statements"]) == 2  # traces, conversations
    monkeypatch.undo()
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 200) == [
        tid(1000),
        tid(1001),
        tid(1002),
    ]
    assert store.idle_conversations(idle_seconds=1, now=T0 + 200) == []


def test_more_ids_than_one_statement_takes_are_all_marked(store: SpanStore) -> None:
    page = settled_page(store, 1_234)
    store.mark_planned(traces=page + page[:10], now=T0 + 100)  # repeated ids are harmless
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 200) == []


def test_a_crash_between_jobs_and_marks_loses_neither(
    store: SpanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = settled_page(store, 20)

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed between the jobs and the marks")

    monkeypatch.setattr(spans_module, "mark_planned_in", crash)
    with pytest.raises(RuntimeError, match="killed"):
        store.enqueue_planned([job(t) for t in page], traces=page, now=T0 + 100)
    monkeypatch.undo()
    # nothing half-written: no job without its mark, no mark without its jobs
    assert store.stats(now=T0 + 100).pending == 0
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 100, limit=50) == page
    # planned again, as the next tick would: every job once
    assert store.enqueue_planned([job(t) for t in page], traces=page, now=T0 + 101) == 20
    assert store.enqueue_planned([job(t) for t in page], traces=page, now=T0 + 102) == 0
    assert store.stats(now=T0 + 102).pending == 20
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 200) == []


def test_jobs_keep_the_planning_order(store: SpanStore) -> None:
    # claims go by job id: the oldest settled trace's job first, as planned
    ids = [tid(n) for n in (5, 3, 9, 1)]
    store.enqueue_planned([job(t) for t in ids], now=T0)
    claimed = store.claim_jobs(owner="w", limit=10, lease_seconds=60, now=T0)
    assert [j.target_id for j in claimed] == ids


def test_enqueue_planned_of_nothing_writes_nothing(
    store: SpanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = count_statements(store, monkeypatch)
    assert store.enqueue_planned([], now=T0) == 0
    store.mark_planned(now=T0)
    assert seen["transactions"] == 0


def test_odd_ids_in_a_page_are_stored_and_marked(store: SpanStore) -> None:
    conversation = "chat-\x00-\ud800-'; DROP TABLE jobs; --"
    store.write_spans([span(1, 1, conversation=conversation)], now=T0)
    spec = JobSpec("topics", "conversation", conversation, tid(1), sid(1), conversation, 1.0)
    assert store.enqueue_planned([spec], conversations=[conversation], now=T0 + 500) == 1
    assert store.idle_conversations(idle_seconds=1, now=T0 + 600) == []
    assert store.stats(now=T0 + 600).pending == 1


def test_traces_spans_reads_several_traces_as_trace_spans_does(store: SpanStore) -> None:
    store.write_spans(
        [span(1, 1), span(1, 2, parent=1, start=-5), span(2, 3), span(3, 4, start=7)], now=T0
    )
    wanted = [tid(3), tid(1), tid(404)]
    found = store.traces_spans(wanted)
    assert list(found) == wanted  # every id asked for, unknown ones empty
    assert found[tid(404)] == []
    for trace in (tid(1), tid(3)):
        assert found[trace] == store.trace_spans(trace)
    assert [s.span_id for s in found[tid(1)]] == [sid(2), sid(1)]  # by start time


def test_traces_spans_over_more_ids_than_one_statement_takes(store: SpanStore) -> None:
    store.write_spans([span(i, i) for i in range(1, 1_101)], now=T0)
    found = store.traces_spans([tid(i) for i in range(1, 1_101)])
    assert all(len(found[tid(i)]) == 1 for i in range(1, 1_101))
