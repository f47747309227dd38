"""The app keeps running while its span store fails, and the loop catches up once it is back.

A traced app (``@observe`` through the real StoreSpanExporter) is called while the SQLite file is
locked by another process, while writes fail with "database or disk is full", and after the file
was deleted under the running process; PostgreSQL loses every connection in the middle of a
monitor run. In each case: app calls return their value (or raise their own exception) unchanged,
spans that could not be stored are dropped and counted by reason (exporter and Prometheus agree),
and afterwards the monitor evaluates exactly what was stored, each (rule, target) once.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import StoreError
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.exporters._store_spans import QUEUE_FULL, STORE_ERROR, StoreSpanExporter
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.reliability.app import ANSWER, AppError, agent, failing_agent
from tests.reliability.probes import NO_OPINIONS, prom
from tests.support.sqlite_lock import locked_by_another_process

LEASE = 30.0
DROPPED = "spanjudge_exporter_dropped_spans_total"
WRITTEN = "spanjudge_exporter_written_spans_total"


@dataclass
class Calls:
    """What a burst of app calls produced."""

    spans: int = 0
    max_queued: int = 0


def call_app(exporter: StoreSpanExporter, n: int, tag: str) -> Calls:
    """``n`` app calls in a thread; every third raises. Each result must come back unchanged,
    and the burst must finish (a call blocked on the store would hang the thread)."""
    calls = Calls()
    failures: list[str] = []

    def run() -> None:
        for i in range(n):
            if i % 3 == 2:
                error = AppError(f"{tag} {i}")
                try:
                    failing_agent(f"{tag} question {i}?", error)
                    failures.append(f"call {i} did not raise")
                except AppError as raised:
                    if raised is not error:
                        failures.append(f"call {i} raised another exception object")
                calls.spans += 2  # agent + retrieval
            else:
                answer = f"{ANSWER} ({tag} {i})"
                if agent(f"{tag} question {i}?", answer) != answer:
                    failures.append(f"call {i} returned another value")
                calls.spans += 3
            calls.max_queued = max(calls.max_queued, exporter.queued)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "app calls blocked on a failing store"
    assert failures == []
    return calls


def stored_agent_spans(store: SpanStore) -> set[str]:
    return {
        span.span_id
        for trace_id in store.targets_since(since=0, until=1e13)[0]
        for span in store.trace_spans(trace_id)
        if span.attributes.get(attrs.GEN_AI_OPERATION_NAME) == "invoke_agent"
    }


def make_monitor(store: SpanStore, judge: Any, sink: Any, clock: Any, **options: Any) -> Monitor:
    return Monitor(
        [Rule(BiasMetric(model=judge), target="agent")],
        store=store,
        emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url)),
        clock=clock,
        config=MonitorConfig(
            settle_seconds=10, lease_seconds=LEASE, retention_seconds=None, **options
        ),
    )


def catch_up(mon: Monitor, clock: Any, ticks: int = 4) -> list[str]:
    """Ticks past settle and lease times until one finds nothing to do; their outcomes."""
    outcomes = []
    for _ in range(ticks):
        clock.advance(LEASE + 11)
        try:
            report = mon.tick()
        except StoreError:
            outcomes.append("store_error")
            continue
        outcomes.append(f"claimed {report.claimed}")
        if report.claimed == 0 and report.reemitted == 0:
            return outcomes
    raise AssertionError(f"the monitor never caught up: {outcomes}")


def assert_each_target_once(
    store: SpanStore, sink: Any, expected: set[str], earlier_spans: int = 0
) -> None:
    """One result per stored target; the sink got their span ids (after ``earlier_spans``)."""
    results = store.results()
    keys = [(r.rule, r.target_id) for r in results]
    assert len(keys) == len(set(keys)), f"a (rule, target) evaluated twice: {sorted(keys)}"
    assert {r.target_id for r in results} == expected
    ids = {s.span_id for s in sink.spans[earlier_spans:]}
    assert ids == {r.evaluation_span_id for r in results}


@pytest.fixture
def exporter_factory(route_spans: Any, clock: Any, telemetry: Any) -> Iterator[Any]:
    made: list[StoreSpanExporter] = []

    def make(store: SpanStore, **options: Any) -> StoreSpanExporter:
        options.setdefault("flush_interval", 0.01)
        exporter = StoreSpanExporter(
            store,
            clock=clock,
            on_written=telemetry.record_exporter_written,
            on_dropped=telemetry.record_exporter_dropped,
            **options,
        )
        route_spans(SimpleSpanProcessor(exporter))
        made.append(exporter)
        return exporter

    yield make
    for exporter in made:
        exporter.shutdown()


def test_app_runs_on_while_another_process_locks_the_sqlite_file(
    exporter_factory: Any,
    healthy_judge_server: ScriptedJudgeServer,
    sink: Any,
    clock: Any,
    registry: Any,
    tmp_path: Path,
) -> None:
    """Expected: while the file is locked, app calls return unchanged and never wait on the
    store; the queue stays within its bound; every span of that time is dropped and counted
    (store_error, and queue_full beyond the queue), identically in Prometheus; a monitor tick
    fails with StoreError instead of hanging; once the lock is gone the monitor evaluates
    everything stored before and after, each target once."""
    path = tmp_path / "spans.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    exporter = exporter_factory(store, max_queue_spans=8, batch_size=4)
    before = call_app(exporter, 3, "before")
    assert exporter.force_flush(10_000) and exporter.written == before.spans
    mon = make_monitor(store, healthy_judge_server.judge(timeout=10.0), sink, clock)

    with locked_by_another_process(path):
        during = call_app(exporter, 12, "locked")
        assert exporter.force_flush(10_000)
        clock.advance(11)
        with pytest.raises(StoreError, match="locked"):
            mon.tick()
    assert during.max_queued <= 8
    dropped = exporter.dropped
    assert exporter.written == before.spans
    assert sum(dropped.values()) == during.spans, dropped
    assert set(dropped) <= {STORE_ERROR, QUEUE_FULL} and dropped[STORE_ERROR] > 0
    for reason, count in dropped.items():
        assert prom(registry, DROPPED, reason=reason) == count
    assert prom(registry, WRITTEN) == before.spans

    after = call_app(exporter, 3, "after")
    assert exporter.force_flush(10_000)
    assert exporter.written == before.spans + after.spans
    assert exporter.dropped == dropped  # nothing more lost once the lock is gone
    outcomes = catch_up(mon, clock)
    stored = stored_agent_spans(store)
    assert len(stored) == 6  # 3 turns before, 3 after; none of the locked time
    assert_each_target_once(store, sink, stored)
    assert make_monitor(store, healthy_judge_server.judge(), sink, clock).tick().claimed == 0, (
        outcomes
    )
    mon.close()
    store.close()


def test_app_runs_on_while_the_disk_is_full(
    exporter_factory: Any,
    healthy_judge_server: ScriptedJudgeServer,
    sink: Any,
    clock: Any,
    registry: Any,
    tmp_path: Path,
) -> None:
    """Expected: with writes failing "database or disk is full" (SQLite's max_page_count, the
    same error a full disk gives), app calls return unchanged and their spans are dropped as
    store_error, counted the same in Prometheus; monitor ticks fail with StoreError or do what
    fits; after retention frees space, writing resumes by itself and the monitor evaluates
    every stored target exactly once, including those stored before the fault."""
    store = SQLiteStore(tmp_path / "spans.db", pragmas={"max_page_count": 160})
    exporter = exporter_factory(store, max_queue_spans=1000, batch_size=8)
    before = call_app(exporter, 3, "before")
    assert exporter.force_flush(10_000) and exporter.written == before.spans
    old = clock.now - 5000
    junk = {"gen_ai.input.messages": "x" * 4000}
    with pytest.raises(StoreError, match="full"):
        for n in range(10_000):  # fill the database with old, unrelated spans
            record = SpanRecord(f"{n + 1:032x}", f"{n + 1:016x}", "junk", 1, 2, attributes=junk)
            store.write_spans([record], now=old)
    # then the free space inside the last pages, which a small span could still take (a batch
    # of one app span did, now and then, and the write counts were off by one)
    with pytest.raises(StoreError, match="full"):
        for n in range(10_000):
            record = SpanRecord(f"{n + 1:032x}", f"{n + 20_001:016x}", "junk", 1, 2)
            store.write_spans([record], now=old)

    during = call_app(exporter, 9, "full")
    assert exporter.force_flush(10_000)
    assert exporter.written == before.spans
    assert exporter.dropped == {STORE_ERROR: during.spans}
    assert prom(registry, DROPPED, reason=STORE_ERROR) == during.spans

    mon = make_monitor(store, healthy_judge_server.judge(timeout=10.0), sink, clock)
    clock.advance(11)
    try:
        mon.tick()
        during_fault = "ok"
    except StoreError as exc:
        during_fault = "full" if "full" in str(exc) else str(exc)
    assert during_fault in ("ok", "full")

    assert store.delete_older_than(old + 1) > 0  # retention frees the pages
    after = call_app(exporter, 3, "after")
    assert exporter.force_flush(10_000)
    assert exporter.written == before.spans + after.spans
    assert exporter.dropped == {STORE_ERROR: during.spans}
    catch_up(mon, clock)
    stored = stored_agent_spans(store)
    assert len(stored) == 6
    assert_each_target_once(store, sink, stored)
    mon.close()
    store.close()


def test_app_runs_on_when_the_database_file_is_deleted_under_it(
    exporter_factory: Any,
    healthy_judge_server: ScriptedJudgeServer,
    sink: Any,
    clock: Any,
    tmp_path: Path,
) -> None:
    """Expected: after the file (and its -wal/-shm) is deleted, app calls return unchanged;
    the store recreates the file, so spans are written (any loss is counted: written +
    dropped == produced); the monitor evaluates what the new file holds, each target once,
    and what a second process sees in the file is the same."""
    path = tmp_path / "spans.db"
    store = SQLiteStore(path)
    exporter = exporter_factory(store, max_queue_spans=100, batch_size=4)
    call_app(exporter, 3, "before")
    assert exporter.force_flush(10_000)
    mon = make_monitor(store, healthy_judge_server.judge(timeout=10.0), sink, clock)
    clock.advance(11)
    assert mon.tick().scored == 2  # the two turns that returned a value

    earlier_spans = len(sink.spans)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    written_before = exporter.written
    after = call_app(exporter, 6, "after")
    assert exporter.force_flush(10_000)
    # the store noticed the new (missing) file and recreated it: nothing lost, nothing hidden
    assert exporter.dropped == {}
    assert exporter.written - written_before == after.spans
    assert path.exists()

    catch_up(mon, clock)
    stored = stored_agent_spans(store)
    assert len(stored) == 6  # the turns after the deletion; those before went with the file
    assert_each_target_once(store, sink, stored, earlier_spans)
    # the results are in the file on disk (a second process sees them), not in a ghost inode
    other = SQLiteStore(path)
    assert {r.target_id for r in other.results()} == stored
    other.close()
    mon.close()
    store.close()


def test_postgresql_connections_killed_mid_run_then_evaluation_resumes(
    exporter_factory: Any,
    sink: Any,
    clock: Any,
    pg_schema: tuple[str, str],
) -> None:
    """Expected: every connection of the store is terminated by the server while the monitor
    is waiting on the judge (a stand-in for a restart; the shared server is not restarted).
    The monitor recovers by itself in later ticks: every target gets exactly one result and one
    evaluation span id, and a further tick finds nothing to do."""
    from spanjudge._store.postgres import PostgresStore

    url, schema = pg_schema
    app_name = f"spanjudge-rel-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(url, schema=schema, application_name=app_name, max_size=4, timeout=5)
    exporter = exporter_factory(store, max_queue_spans=100, batch_size=4)
    call_app(exporter, 6, "pg")  # 4 turns return a value, 2 raise
    assert exporter.force_flush(10_000) and exporter.dropped_total == 0
    killed: list[int] = []
    once = threading.Lock()

    def kill_then_answer(request: Any) -> Any:
        with once:  # the first judge request, while the monitor's jobs are leased
            if not killed:
                with psycopg.connect(url, autocommit=True) as admin:
                    row = admin.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE application_name = %s",
                        (app_name,),
                    ).fetchone()
                killed.append(int(row[0]) if row else 0)
        return NO_OPINIONS

    with ScriptedJudgeServer() as judge_server:
        judge_server.add_rule(kill_then_answer, schema="Opinions")
        mon = make_monitor(store, judge_server.judge(timeout=10.0), sink, clock, concurrency=2)
        outcomes = catch_up(mon, clock, ticks=6)
        assert killed and killed[0] >= 1, "no connection was terminated mid-run"
        stored = stored_agent_spans(store)
        assert len(stored) == 6
        assert_each_target_once(store, sink, stored)
        scored = [r for r in store.results() if r.status == "scored"]
        assert len(scored) == 4  # the 2 turns that raised have no output: skipped, no judge
        assert len(judge_server.requests) == len(scored), "a target was judged twice"
        again = make_monitor(store, judge_server.judge(), sink, clock).tick()
        assert again.claimed == 0 and again.reemitted == 0, outcomes
        mon.close()
    store.close()
