"""PostgreSQL day partitions of spans and outbox entries: made on demand (by several workers at
once), dropped by retention only when nothing in them is still needed, a span delivered again
across a day's edge stored once, and a version-11 store with data migrated. SQLite keeps its
plain tables."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._store import sql as sql_module
from spanjudge._store.models import JobSpec, OutboxEntry
from spanjudge._store.partitions import (
    DAY_NS,
    DAY_SECONDS,
    arrival_day,
    partition_name,
    span_day,
)
from spanjudge._store.postgres import PostgresStore
from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sqlite import SQLiteStore
from tests.exporters.store.test_store import sid, tid
from tests.support.stores import POSTGRES_URL, drop_schema, open_postgres, schema_name

DAY1 = 1_699_920_000.0  # 2023-11-14 00:00 UTC
DAY2 = DAY1 + DAY_SECONDS
DAY3 = DAY2 + DAY_SECONDS
NS = 1_000_000_000


def at(seconds: float) -> int:
    return int(seconds * NS)


def span_at(trace: int, n: int, start: float, *, parent: int | None = None) -> SpanRecord:
    return SpanRecord(
        tid(trace),
        sid(n),
        "step",
        at(start),
        at(start) + NS,
        parent_span_id=sid(parent) if parent else None,
    )


def entry(s: SpanRecord, release_at: float) -> OutboxEntry:
    return OutboxEntry(s.trace_id, s.span_id, False, release_at)


@pytest.fixture
def schema() -> Iterator[str]:
    name = schema_name("spanjudge_parts")
    yield name
    drop_schema(name)


def open_store(schema: str) -> PostgresStore:
    return PostgresStore(POSTGRES_URL, schema=schema, max_size=4, timeout=5.0)


def partitions(store: PostgresStore, table: str) -> list[str]:
    with store.transaction() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE i.inhparent = to_regclass(%s) AND n.nspname = %s ORDER BY 1",
            (table, store.schema),
        )
        return [row[0] for row in cur.fetchall()]


def count(store: PostgresStore, table: str) -> int:
    with store.transaction() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        return int(cur.fetchone()[0])


def day_of(seconds: float) -> str:
    return partition_name("spans", arrival_day(seconds))


def test_day_arithmetic_matches_the_servers_routing_at_the_edges() -> None:
    assert span_day(at(DAY2) - 1) == span_day(at(DAY1)) == span_day(at(DAY2)) - 1
    assert arrival_day(DAY2) == arrival_day(DAY1) + 1
    assert arrival_day(DAY2 - 1e-6) == arrival_day(DAY1)
    assert partition_name("spans", span_day(at(DAY1))) == "spans_p20231114"
    assert partition_name("outbox", arrival_day(DAY3 + 5)) == "outbox_p20231116"
    assert span_day(0) == 0 and partition_name("spans", 0) == "spans_p19700101"
    assert DAY_NS == DAY_SECONDS * NS


def test_writes_make_the_partitions_of_their_days_in_the_stores_schema(schema: str) -> None:
    store = open_store(schema)
    try:
        spans = [span_at(1, 1, DAY1 + 10), span_at(1, 2, DAY2 + 10, parent=1)]
        store.write_spans(spans, now=DAY2 + 20, outbox=[entry(s, DAY2 + 20) for s in spans])
        names = partitions(store, "spans")
        assert {"spans_p20231114", "spans_p20231115"} <= set(names)
        assert "outbox_p20231115" in partitions(store, "outbox")
        assert "outbox_p20231114" not in partitions(store, "outbox")  # by arrival, not start
        assert [s.span_id for s in store.trace_spans(tid(1))] == [sid(1), sid(2)]
        with store.transaction() as cur:  # nothing leaked into the default search path
            cur.execute("SELECT to_regclass('public.spans_p20231114')")
            assert cur.fetchone()[0] is None
    finally:
        store.close()


def test_several_workers_making_the_same_new_partitions_at_once_all_succeed(schema: str) -> None:
    workers = [open_store(schema) for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(workers))

    def write(i: int, store: PostgresStore) -> None:
        try:
            start.wait()
            days = [DAY1 + 5 + d * DAY_SECONDS for d in range(5)]
            spans = [span_at(100 + i, 10 * i + d, t) for d, t in enumerate(days)]
            store.write_spans(spans, now=days[-1], outbox=[entry(s, days[-1]) for s in spans])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert count(workers[0], "spans") == 20
        made = [n for n in partitions(workers[0], "spans") if "_p" in n and n <= "spans_p20231118"]
        assert made == [f"spans_p202311{day}" for day in range(14, 19)]
    finally:
        for store in workers:
            store.close()


def test_a_span_delivered_again_after_midnight_is_stored_and_forwarded_once(schema: str) -> None:
    store = open_store(schema)
    try:
        late_evening = span_at(1, 1, DAY2 - 0.001)  # started just before midnight
        store.write_spans([late_evening], now=DAY2 - 0.0005, outbox=[entry(late_evening, DAY2)])
        # the client's retry arrives after midnight: another arrival day, the same start
        store.write_spans([late_evening], now=DAY2 + 30, outbox=[entry(late_evening, DAY2 + 30)])
        assert count(store, "spans") == 1
        assert count(store, "outbox") == 1
        claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=DAY2 + 60)
        assert [i.span.span_id for i in claim.items if i.span] == [sid(1)]
        # a batch big enough for COPY, half of it already stored the day before
        batch = [span_at(2, n, DAY2 - 20 + n) for n in range(40)]
        store.write_spans(batch[:20], now=DAY2 - 1, outbox=[entry(s, DAY2) for s in batch[:20]])
        store.write_spans(batch, now=DAY2 + 40, outbox=[entry(s, DAY2 + 40) for s in batch])
        assert len(store.trace_spans(tid(2))) == 40
        assert count(store, "outbox") == 41
    finally:
        store.close()


def test_retention_drops_a_whole_past_day_and_keeps_the_rest(schema: str) -> None:
    store = open_store(schema)
    try:
        old = [span_at(1, n, DAY1 + n) for n in range(1, 4)]
        recent = [span_at(2, 10, DAY2 + 10)]
        store.write_spans(old, now=DAY1 + 100, outbox=[entry(s, DAY1 + 100) for s in old])
        store.write_spans(recent, now=DAY2 + 100, outbox=[entry(s, DAY2 + 100) for s in recent])
        claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=DAY2 + 100)
        store.mark_forwarded([i.entry_id for i in claim.items], now=DAY2 + 100)
        # the cutoff is past day 1 and inside day 2
        assert store.delete_older_than(DAY2 + 200) == 3
        assert "spans_p20231114" not in partitions(store, "spans")
        assert "outbox_p20231114" not in partitions(store, "outbox")
        # day 2 is still inside the horizon as a whole: its row that expired stays for now
        assert [s.span_id for s in store.trace_spans(tid(2))] == [sid(10)]
        assert store.trace_spans(tid(1)) == []
        # the span of day 1 delivered again after its partition went is stored again
        store.write_spans(old[:1], now=DAY3)
        assert [s.span_id for s in store.trace_spans(tid(1))] == [sid(1)]
    finally:
        store.close()


def test_a_day_with_an_unforwarded_entry_or_a_late_span_is_kept(schema: str) -> None:
    store = open_store(schema)
    try:
        first = [span_at(1, 1, DAY1 + 1), span_at(1, 2, DAY1 + 2, parent=1)]
        store.write_spans(first[:1], now=DAY1 + 10, outbox=[entry(first[0], DAY1 + 10)])
        store.enqueue_planned(
            [JobSpec("faith", "trace", tid(1), tid(1), None)], traces=[tid(1)], now=DAY1 + 20
        )
        # a span of that trace, started on day 1, arrives two days later: the trace is planned
        # again for it, so day 1 of spans stays whole (no row of it is deleted one by one:
        # the drop is the one retention path) and the late span is planned with its parent
        store.write_spans(first[1:], now=DAY3 + 10)
        assert store.late_spans([tid(1)]) == {tid(1): {sid(2)}}
        assert store.delete_older_than(DAY3) == 0
        assert "spans_p20231114" in partitions(store, "spans")
        assert [s.span_id for s in store.trace_spans(tid(1))] == [sid(1), sid(2)]
        assert store.late_spans([tid(1)]) == {tid(1): {sid(2)}}
        # the unforwarded outbox entry of day 1 keeps its partition until it is sent
        assert "outbox_p20231114" in partitions(store, "outbox")
        claim = store.claim_outbox(owner="w", limit=9, lease_seconds=30, now=DAY3)
        assert len(claim.items) + len(claim.missing) == 1
        store.mark_forwarded([*claim.missing, *(i.entry_id for i in claim.items)], now=DAY3 + 5)
        store.delete_older_than(DAY3 + 1)
        assert "outbox_p20231114" in partitions(store, "outbox")  # forwarded after the cutoff
        store.delete_older_than(DAY3 + DAY_SECONDS)
        assert "outbox_p20231114" not in partitions(store, "outbox")
        assert "spans_p20231114" not in partitions(store, "spans")
    finally:
        store.close()


def test_a_worker_that_saw_a_partition_another_dropped_writes_into_it_again(schema: str) -> None:
    writer, retention = open_store(schema), open_store(schema)
    try:
        writer.write_spans([span_at(1, 1, DAY1 + 1)], now=DAY1 + 10)
        assert retention.delete_older_than(DAY3) == 1
        # the writer still believes day 1 exists: its row lands in the default partition
        writer.write_spans([span_at(1, 2, DAY1 + 2)], now=DAY3 + 10)
        assert [s.span_id for s in writer.trace_spans(tid(1))] == [sid(2)]
        assert count(writer, "spans_default") == 1
        writer.write_spans([span_at(1, 2, DAY1 + 2)], now=DAY3 + 20)  # and is still one row
        assert count(writer, "spans") == 1
    finally:
        writer.close()
        retention.close()


def test_a_version_11_store_with_data_is_partitioned_in_place(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(sql_module, "MIGRATIONS", sql_module.MIGRATIONS[:11])
        old = open_postgres(schema)
        spans = [span_at(1, 1, DAY1 + 1), span_at(1, 2, DAY2 + 1, parent=1), span_at(2, 3, 5)]
        old.write_spans(spans, now=DAY2 + 10, outbox=[entry(s, DAY2 + 10) for s in spans])
        old.enqueue_jobs([JobSpec("faith", "trace", tid(1), tid(1), None)], now=DAY2 + 10)
        with old.transaction() as cur:  # an entry from before version 8: no arrival
            cur.execute("UPDATE outbox SET arrived_at = NULL WHERE span_id = %s", (sid(3),))
            cur.execute("SELECT max(entry_id) FROM outbox")
            last_id = int(cur.fetchone()[0])
        assert old.schema_version() == 11
        old.close()
    new = open_store(schema)
    try:
        assert new.schema_version() == SCHEMA_VERSION >= 12
        # days older than a month get no partition: their rows wait in the default one
        assert not {"spans_p19700101", "spans_p20231114"} & set(partitions(new, "spans"))
        assert count(new, "spans_default") == 3 and count(new, "outbox_default") == 3
        assert [s.span_id for s in new.trace_spans(tid(1))] == [sid(1), sid(2)]
        # a span delivered again after the migration is still a repeat; ids continue. Its
        # day's partition is made for the write and takes that day's rows out of the default
        new.write_spans(spans[:1], now=DAY3, outbox=[entry(spans[0], DAY3)])
        assert "spans_p20231114" in partitions(new, "spans")
        assert count(new, "spans_p20231114") == 1 and count(new, "spans_default") == 2
        fresh = [span_at(3, 4, DAY3 + 1)]
        new.write_spans(fresh, now=DAY3, outbox=[entry(fresh[0], DAY3)])
        assert count(new, "spans") == 4 and count(new, "outbox") == 4
        with new.transaction() as cur:
            cur.execute("SELECT entry_id FROM outbox WHERE span_id = %s", (sid(4),))
            assert int(cur.fetchone()[0]) > last_id
        claim = new.claim_outbox(owner="w", limit=9, lease_seconds=30, now=DAY3 + 5)
        assert sorted(i.span.span_id for i in claim.items if i.span) == [
            sid(n) for n in (1, 2, 3, 4)
        ]
        assert len(new.claim_jobs(owner="w", limit=5, lease_seconds=60, now=DAY3)) == 1
    finally:
        new.close()


def test_a_span_starting_far_from_its_arrival_makes_no_partition(schema: str) -> None:
    store = open_store(schema)
    try:
        before = partitions(store, "spans")
        unset = span_at(1, 1, 0)  # a start time of 0, as some exporters send
        future = span_at(2, 2, DAY3 + 5)  # a clock two days ahead
        store.write_spans([unset, future], now=DAY1 + 10)
        made = sorted(set(partitions(store, "spans")) - set(before))
        assert made == ["spans_p20231114", "spans_p20231115"]  # the write's day and the next
        assert count(store, "spans_default") == 2
        # the future day's partition, made when writes reach it, takes its row along
        store.write_spans([span_at(3, 3, DAY3 + 1)], now=DAY3 + 10)
        assert count(store, "spans_p20231116") == 2 and count(store, "spans_default") == 1
        store.write_spans([future], now=DAY3 + 20)  # delivered again: still one row
        assert count(store, "spans") == 3
        # the default partition is emptied row by row, whatever the retention grain
        assert store.delete_older_than(DAY1 + 11) == 1
        assert count(store, "spans_default") == 0
    finally:
        store.close()


def test_a_long_reader_of_spans_delays_no_write_to_a_new_day(schema: str) -> None:
    import psycopg

    store = open_store(schema)
    try:
        store.write_spans([span_at(1, 1, DAY1 + 1)], now=DAY1 + 10)
        with psycopg.connect(POSTGRES_URL) as reader:  # a report reading spans, in a transaction
            reader.execute(f'SELECT count(*) FROM "{schema}".spans').fetchone()
            # the next day's partition exists already (made a day ahead); the one after waits
            # for the reader's lock, gives up and the row goes to the default partition
            store.write_spans([span_at(2, 2, DAY3 + 1)], now=DAY3 + 10)
            assert "spans_p20231116" not in partitions(store, "spans")
            assert count(store, "spans_default") == 1
        store.write_spans([span_at(3, 3, DAY3 + 2)], now=DAY3 + 20)  # the reader is gone
        assert count(store, "spans_p20231116") == 2 and count(store, "spans_default") == 0
    finally:
        store.close()


def test_sqlite_keeps_plain_tables_at_the_same_version(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "spans.db"))
    try:
        assert store.schema_version() == SCHEMA_VERSION
        store.write_spans([span_at(1, 1, DAY1 + 1)], now=DAY1 + 10)
        store.write_spans([span_at(1, 1, DAY1 + 1)], now=DAY2 + 10)
        with store.transaction() as cur:
            cur.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'spans_p%'")
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT count(*) FROM spans")
            assert cur.fetchone()[0] == 1
        assert store.delete_older_than(DAY1 + 11) == 1  # row retention, to the second
    finally:
        store.close()
