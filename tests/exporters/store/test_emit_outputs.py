"""Per-output delivery marks (schema migration 3) on a database the previous release filled.

A v2 database knows one output (the span): ``emitted_at``. Opening it with the current code
adds ``event_emitted_at``; results already emitted count as delivered for the event output too
(replaying history into a logs backend would be a flood), and results not emitted yet owe both.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore
from spanjudge.exporters._delivery import Delivery
from tests.exporters.store.conftest import FIXTURES, V2_DUMP_SCHEMA
from tests.support.stores import (
    POSTGRES_URL,
    StoreFactory,
    postgres_unreachable,
    schema_name,
    stores_on,
)

T = 1_700_000_000.0
TRACE, ROOT = "a" * 32, "b" * 16
EMITTED_AT = T + 5  # when the old release emitted the fixture's result (job 1)
SCHEMA = "{schema}"


def _bias_record() -> str:
    return json.dumps(
        {
            "rule": "bias",
            "metric": "bias",
            "target_type": "agent",
            "target_id": ROOT,
            "trace_id": TRACE,
            "span_id": ROOT,
            "status": "scored",
            "score": 0.0,
            "label": "pass",
            "finished_at": T + 4,
        }
    )


# On top of the fixture: its result (job 1) was emitted by the old code, and a second result
# (job 3) was stored and not emitted yet when the old release stopped.
EXTRA = [
    f"UPDATE {SCHEMA}results SET emitted_at = {EMITTED_AT} WHERE job_id = 1",
    f"INSERT INTO {SCHEMA}results (job_id, rule, metric, target_type, target_id, trace_id,"
    f" status, cost, created_at, emitted_at, record) VALUES (3, 'bias', 'bias', 'agent',"
    f" '{ROOT}', '{TRACE}', 'scored', NULL, {T + 4}, NULL, '{_bias_record()}')",
]


@pytest.fixture
def v2_with_history(backend: str, tmp_path: Path) -> Iterator[StoreFactory]:
    """A v2 database (the fixture dump) with one emitted and one unemitted result."""
    path, schema = tmp_path / "v2.db", schema_name()
    dump = (FIXTURES / f"schema_v2.{backend}.sql").read_text(encoding="utf-8")
    if backend == "sqlite":
        extra = ";\n".join(s.replace(SCHEMA, "") for s in EXTRA)
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.executescript(dump + "\n" + extra + ";")
    else:
        import psycopg

        extra = ";\n".join(s.replace(SCHEMA, schema + ".") for s in EXTRA)
        try:
            with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
                conn.execute(dump.replace(V2_DUMP_SCHEMA, schema).encode())
                conn.execute(extra.encode())
        except psycopg.OperationalError as exc:
            postgres_unreachable(exc)
    with stores_on(backend, path, schema) as make:
        yield make


def _marks(store: SpanStore) -> dict[int, tuple[Any, Any]]:
    assert isinstance(store, SpanStore)
    with store.transaction(write=False) as cur:
        cur.execute("SELECT job_id, emitted_at, event_emitted_at FROM results ORDER BY job_id")
        return {int(row[0]): (row[1], row[2]) for row in cur.fetchall()}


def test_results_emitted_before_the_upgrade_count_as_delivered_for_the_event_output(
    v2_with_history: StoreFactory,
) -> None:
    store = v2_with_history()
    assert store.schema_version() == SCHEMA_VERSION >= 3
    assert _marks(store) == {1: (EMITTED_AT, EMITTED_AT), 3: (None, None)}
    assert [item.job_id for item in store.unemitted_results(outputs=["event"])] == [3]
    assert [item.job_id for item in store.unemitted_results(outputs=["span"])] == [3]


def test_a_result_not_emitted_before_the_upgrade_owes_both_outputs_each_marked_apart(
    v2_with_history: StoreFactory,
) -> None:
    store = v2_with_history()
    [owed] = store.unemitted_results()
    assert (owed.job_id, owed.outputs, owed.record.rule) == (3, ("span", "event"), "bias")
    store.mark_emitted([3], now=T + 100, output="event")
    [still] = store.unemitted_results()
    assert (still.job_id, still.outputs) == (3, ("span",))
    assert store.unemitted_results(outputs=["event"]) == []
    store.mark_emitted([3], now=T + 101, output="span")
    assert store.unemitted_results() == []
    # a second mark of an output keeps the first delivery time
    store.mark_emitted([3], now=T + 200, output="event")
    assert _marks(store)[3] == (T + 101, T + 100)


class RecordingEmitter:
    """Takes what delivery re-sends and confirms it at once."""

    outputs = ("span", "event")

    def __init__(self) -> None:
        self.sent: list[tuple[Any, tuple[str, ...]]] = []
        self._confirmed: list[tuple[Any, str]] = []

    def emit(self, record: Any, key: Any = None, *, outputs: Any = None) -> None:
        chosen = tuple(outputs or self.outputs)
        self.sent.append((key, chosen))
        self._confirmed.extend((key, o) for o in chosen)

    def take_confirmed(self) -> list[tuple[Any, str]]:
        confirmed, self._confirmed = self._confirmed, []
        return confirmed

    def force_flush(self, timeout_seconds: float = 10, *, outputs: Any = None) -> bool:
        return True

    def shutdown(self, timeout_seconds: float = 10) -> None:
        pass


def test_the_first_delivery_after_the_upgrade_replays_no_history(
    v2_with_history: StoreFactory,
) -> None:
    store = v2_with_history()
    emitter = RecordingEmitter()
    delivery = Delivery(store, emitter, clock=lambda: T + 1000, lease_seconds=60)
    assert delivery.reemit(T + 1000, flush_timeout=1) == 1
    assert emitter.sent == [(3, ("span", "event"))]  # job 1 went out before: not again
    assert store.unemitted_results() == []
    assert delivery.reemit(T + 2000, flush_timeout=1) == 0
