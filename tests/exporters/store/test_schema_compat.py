"""Databases open across releases: a fresh one, and one the previous code created and filled.

The previous code's databases are fixtures/schema_v2.*.sql, dumped from stores the code before
the split of ``sql.py`` made (schema version 2). Opening one must bring it to the current
version without losing a row, and end up with exactly the schema a fresh database gets.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.models import JobSpec, OutboxEntry
from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore

StoreFactory = Callable[[], SpanStore]

# What the fixture databases hold (see their header)
T = 1_700_000_000.0
TRACE, ROOT, CHILD = "a" * 32, "b" * 16, "c" * 16
V2 = 2


PARTITION = re.compile(r"_p\d{8}$")


def catalog(store: SpanStore) -> set[tuple[Any, ...]]:
    """Tables, columns and indexes of the store's database, without names of its location."""
    assert isinstance(store, SpanStore)
    with store.transaction(write=False) as cur:
        if store.placeholder == "?":
            cur.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")
            return {tuple(row) for row in cur.fetchall()}
        cur.execute(
            "SELECT table_name, column_name, ordinal_position, data_type, is_nullable,"
            " column_default, is_identity FROM information_schema.columns"
            " WHERE table_schema = current_schema()"
        )
        # day partitions (spans_p20261128) follow the data stored, not the schema
        columns = {("column", *row) for row in cur.fetchall() if not PARTITION.search(row[0])}
        cur.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = current_schema()"
        )
        indexes = {
            ("index", table, name, re.sub(r"ON (ONLY )?\S+\.", r"ON \1", definition))
            for table, name, definition in cur.fetchall()
            if not PARTITION.search(table)
        }
        return columns | indexes


def test_a_fresh_database_opens_at_the_current_version(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert store.schema_version() == SCHEMA_VERSION
    store.write_spans([SpanRecord(TRACE, ROOT, "root", 1, 2)], now=T)
    assert [s.span_id for s in store_factory().trace_spans(TRACE)] == [ROOT]


def test_a_previous_release_database_opens_at_the_current_version_with_its_rows(
    v2_store_factory: StoreFactory,
) -> None:
    store = v2_store_factory()
    assert store.schema_version() == SCHEMA_VERSION >= V2
    assert [(s.span_id, s.name) for s in store.trace_spans(TRACE)] == [
        (ROOT, "agent turn"),
        (CHILD, "llm call"),
    ]
    assert store.trace_spans(TRACE)[0].attributes == {"gen_ai.conversation.id": "conv-1", "n": 3}
    assert len(store.conversation_spans("conv-1")) == 2
    assert store.settled_traces(settle_seconds=0, now=T + 100) == []  # planned by the old code
    [unemitted] = store.unemitted_results()
    job_id, record = unemitted[0], unemitted[1]
    assert (job_id, record.score, record.span_id) == (1, 0.75, CHILD)
    assert store.results_cost_since(rule="faithfulness", since=T) == 0.01
    stats = store.stats(now=T + 10)
    assert (stats.done, stats.leased, stats.outbox_held, stats.outbox_due) == (1, 1, 1, 1)


def test_a_previous_release_database_keeps_working(v2_store_factory: StoreFactory) -> None:
    store = v2_store_factory()
    # the held span is released before its deadline and rides out with the old result
    assert store.release_held(now=T + 30) == 1
    claim = store.claim_outbox(owner="fwd", limit=10, lease_seconds=30, now=T + 30)
    assert [(i.entry_id, [r.score for r in i.results]) for i in claim.items] == [
        (1, []),
        (2, [0.75]),
    ]
    # the old worker's lease on the conversation job expires; this worker takes it over
    [job] = store.claim_jobs(owner="new", limit=5, lease_seconds=60, now=T + 100)
    assert (job.job_id, job.rule, job.attempts) == (2, "tone", 2)
    # ids continue after the old rows (identity / rowid state came along)
    assert store.enqueue_jobs([JobSpec("tone", "trace", TRACE, TRACE, None)], now=T + 100) == 1
    [new_job] = store.claim_jobs(owner="new", limit=5, lease_seconds=60, now=T + 100)
    assert new_job.job_id == 3
    spans = [SpanRecord("d" * 32, "e" * 16, "later", 7, 8)]
    store.write_spans(spans, now=T + 100, outbox=[OutboxEntry("d" * 32, "e" * 16, False, T)])
    assert [s.name for s in store.trace_spans("d" * 32)] == ["later"]


def test_a_previous_release_database_ends_with_the_schema_of_a_fresh_one(
    store_factory: StoreFactory, v2_store_factory: StoreFactory
) -> None:
    fresh, previous = catalog(store_factory()), catalog(v2_store_factory())
    assert fresh == previous
    assert len(fresh) > 20  # the comparison saw the tables, not two empty lists
