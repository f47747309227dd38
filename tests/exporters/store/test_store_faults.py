"""Store faults the online loop must survive: errors surface as StoreError from the call that
hit them, and the next call works again once the cause is gone."""

from __future__ import annotations

import gc
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psycopg
import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.models import JobSpec
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import StoreError
from spanjudge.exporters._store_spans import STORE_ERROR, StoreSpanExporter
from tests.support.sqlite_lock import locked_by_another_process
from tests.support.stores import POSTGRES_URL, open_postgres

T0 = 1_700_000_000.0


def rec(trace: int, n: int) -> SpanRecord:
    return SpanRecord(
        trace_id=f"{trace:032x}",
        span_id=f"{n:016x}",
        name="s",
        start_time_unix_nano=1,
        end_time_unix_nano=2,
    )


def test_sqlite_database_deleted_under_the_store_is_recreated(tmp_path: Path) -> None:
    path = tmp_path / "spans.db"
    store = SQLiteStore(path)
    store.write_spans([rec(1, 1)], now=T0)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    store.write_spans([rec(2, 2)], now=T0)  # reopens a fresh file with the schema
    assert path.exists()
    assert [s.span_id for s in store.trace_spans(f"{2:032x}")] == [f"{2:016x}"]
    assert store.trace_spans(f"{1:032x}") == []  # gone with the file, as expected
    # Another process opening the file sees the data: we did not write into a ghost inode.
    assert SQLiteStore(path).trace_spans(f"{2:032x}")
    store.close()


def _open_handles(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            pass
    return count


def test_sqlite_connections_of_finished_threads_are_released(tmp_path: Path) -> None:
    path = tmp_path / "spans.db"
    store = SQLiteStore(path)
    baseline = _open_handles(path)

    def use() -> None:
        store.write_spans([rec(threading.get_ident() % 1000, 1)], now=T0)

    for _ in range(20):  # e.g. a fresh executor thread per monitor tick
        t = threading.Thread(target=use)
        t.start()
        t.join()
    gc.collect()
    assert _open_handles(path) <= baseline + 1
    store.close()
    assert _open_handles(path) == 0


def test_sqlite_full_database_raises_and_recovers_after_retention(tmp_path: Path) -> None:
    # max_page_count makes SQLite report SQLITE_FULL exactly as a full disk does.
    store = SQLiteStore(tmp_path / "spans.db", pragmas={"max_page_count": 120})
    exporter = StoreSpanExporter(store, batch_size=20, flush_interval=0.01)
    payload = {"gen_ai.input.messages": "x" * 2000}
    written_before_full = 0
    with pytest.raises(StoreError, match="full"):
        for n in range(1000):
            store.write_spans(
                [SpanRecord(f"{n:032x}", f"{n:016x}", "s", 1, 2, attributes=payload)], now=T0
            )
            written_before_full += 1
    assert written_before_full > 0
    # Through the exporter, the same failure drops and counts instead of raising.
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for _ in range(5):
        with tracer.start_as_current_span("s") as s:
            s.set_attribute("gen_ai.input.messages", "y" * 2000)
    assert exporter.force_flush(10_000)
    assert exporter.dropped == {STORE_ERROR: 5}
    # Retention frees pages; writing resumes without reopening anything.
    assert store.delete_older_than(T0 + 1) == written_before_full
    with tracer.start_as_current_span("after cleanup"):
        pass
    assert exporter.force_flush(10_000)
    assert exporter.written == 1
    provider.shutdown()
    store.close()


def test_sqlite_pragmas_refuse_anything_but_plain_names_and_values(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SQLiteStore(tmp_path / "a.db", pragmas={"cache_size; DROP TABLE spans": 1})
    with pytest.raises(ValueError):
        SQLiteStore(tmp_path / "b.db", pragmas={"cache_size": "1; DROP TABLE spans"})


def test_sqlite_locked_by_another_process_raises_then_recovers(tmp_path: Path) -> None:
    path = tmp_path / "spans.db"
    store = SQLiteStore(path, busy_timeout=0.1)
    with locked_by_another_process(path):
        with pytest.raises(StoreError, match="locked"):
            store.write_spans([rec(1, 1)], now=T0)
        with pytest.raises(StoreError):
            store.claim_jobs(owner="a", limit=1, lease_seconds=1, now=T0)
    store.write_spans([rec(1, n) for n in range(5)], now=T0)
    assert len(store.trace_spans(f"{1:032x}")) == 5
    store.close()


def test_exporter_counts_spans_lost_to_a_locked_database(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    path = tmp_path / "spans.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    exporter = StoreSpanExporter(store, batch_size=100, flush_interval=0.01)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    blocker = sqlite3.connect(path, isolation_level=None)  # another connection = another writer
    blocker.execute("BEGIN EXCLUSIVE")
    for i in range(7):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    assert exporter.force_flush(10_000)
    assert exporter.dropped == {STORE_ERROR: 7}
    blocker.execute("COMMIT")
    blocker.close()
    with tracer.start_as_current_span("after"):
        pass
    assert exporter.force_flush(10_000)
    assert exporter.written == 1
    provider.shutdown()
    store.close()


_CLAIMER = """
import json, sys, time
from spanjudge._store import SQLiteStore
store = SQLiteStore(sys.argv[1], busy_timeout=10)
owner, mode = sys.argv[2], sys.argv[3]
got = []
while True:
    jobs = store.claim_jobs(owner=owner, limit=3, lease_seconds=float(sys.argv[5]),
                            now=float(sys.argv[4]))
    if not jobs:
        break
    got.extend(j.job_id for j in jobs)
    if mode == "hang":
        print(json.dumps(got), flush=True)
        time.sleep(600)
print(json.dumps(got), flush=True)
"""


def test_sqlite_processes_share_jobs_and_a_killed_process_lease_expires(tmp_path: Path) -> None:
    path = str(tmp_path / "spans.db")
    store = SQLiteStore(path)
    specs = [JobSpec("r", "trace", f"t{i}", f"t{i}", None) for i in range(60)]
    assert store.enqueue_jobs(specs, now=T0) == 60
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    # A process claims 3 jobs and is killed mid-evaluation.
    victim = subprocess.Popen(
        [sys.executable, "-c", _CLAIMER, path, "victim", "hang", str(T0), "30"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert victim.stdout is not None
    lost = set(json.loads(victim.stdout.readline()))
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert len(lost) == 3
    # Two processes drain the rest at the same time.
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIMER, path, f"w{i}", "drain", str(T0), "3600"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    claimed: list[int] = []
    for w in workers:
        out, _ = w.communicate(timeout=60)
        claimed.extend(json.loads(out.strip().splitlines()[-1]))
    assert len(claimed) == len(set(claimed)) == 57
    assert lost.isdisjoint(claimed)
    # The killed process's lease expires; another owner takes those jobs.
    assert store.claim_jobs(owner="late", limit=10, lease_seconds=30, now=T0 + 29) == []
    retaken = store.claim_jobs(owner="late", limit=10, lease_seconds=30, now=T0 + 30)
    assert {j.job_id for j in retaken} == lost
    assert all(j.attempts == 2 for j in retaken)
    store.close()


def test_postgresql_connections_killed_mid_run_are_replaced() -> None:
    """Stands in for a server restart without disturbing the shared server: every connection
    of this store is terminated by the server; the store reconnects on the next call."""
    app = f"spanjudge-test-{uuid.uuid4().hex[:8]}"
    schema = f"spanjudge_test_{uuid.uuid4().hex[:12]}"
    from spanjudge._store.postgres import PostgresStore

    open_postgres(schema).close()  # fails clearly when PostgreSQL is unreachable
    store = PostgresStore(POSTGRES_URL, schema=schema, application_name=app, timeout=5)
    try:
        store.write_spans([rec(1, 1)], now=T0)
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (app,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        outcomes = []
        for n in (2, 3):
            try:
                store.write_spans([rec(1, n)], now=T0)
                outcomes.append("ok")
            except StoreError:
                outcomes.append("error")
        assert outcomes[-1] == "ok"  # at worst the first call after the outage fails
        assert len(store.trace_spans(f"{1:032x}")) >= 2
    finally:
        store.drop_schema()
        store.close()


def test_postgresql_unreachable_raises_store_error_without_the_password() -> None:
    from spanjudge._store import open_store

    with pytest.raises(StoreError) as caught:
        open_store("postgresql://postgres:s3cret-pw@127.0.0.1:1/test", timeout=1)
    message = str(caught.value)
    assert "unreachable" in message and "127.0.0.1" in message
    assert "s3cret-pw" not in message
