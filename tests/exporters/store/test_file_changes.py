"""A SQLite file deleted or replaced under a running store is said out loud, once, and counted.

The store already noticed (the file's identity changed when a connection was borrowed) and
carried on with a fresh file, but silently: everything the old file held was gone without a
log line. Now each change is one ERROR naming the path, and ``file_changes`` counts them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.sqlite import SQLiteStore

T0 = 1_700_000_000.0


def span(trace: int) -> SpanRecord:
    return SpanRecord(f"{trace:032x}", f"{trace:016x}", "s", 1, 2)


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _store_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "spanjudge.store" and r.levelno == logging.ERROR
    ]


def test_a_deleted_file_is_logged_once_as_an_error_naming_it_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "spans.db"
    store = SQLiteStore(path)
    store.write_spans([span(1)], now=T0)
    assert _store_errors(caplog) == [] and store.file_changes == 0

    _remove(path)
    for trace in (2, 3, 4):  # several calls after the deletion: one incident
        store.write_spans([span(trace)], now=T0)

    [message] = _store_errors(caplog)
    assert str(path) in message and "deleted" in message and "new, empty" in message
    assert store.file_changes == 1
    assert store.trace_spans(f"{1:032x}") == []  # gone with the file
    assert len(store.trace_spans(f"{4:032x}")) == 1

    _remove(path)  # a second deletion is a second incident
    store.write_spans([span(5)], now=T0)
    assert len(_store_errors(caplog)) == 2 and store.file_changes == 2
    store.close()


def test_a_replaced_file_is_logged_as_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, other = tmp_path / "spans.db", tmp_path / "other.db"
    store = SQLiteStore(path)
    store.write_spans([span(1)], now=T0)
    with SQLiteStore(other) as restored:  # e.g. a backup put back under the same name
        restored.write_spans([span(2)], now=T0)
    _remove(path)
    os.replace(other, path)

    assert [s.trace_id for s in store.trace_spans(f"{2:032x}")] == [f"{2:032x}"]

    [message] = _store_errors(caplog)
    assert str(path) in message and "replaced" in message
    assert store.file_changes == 1
    store.close()


def test_opening_and_using_a_file_is_no_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "spans.db"
    first = SQLiteStore(path)
    second = SQLiteStore(path)  # another process's view of the same file
    for trace in range(1, 20):
        (first if trace % 2 else second).write_spans([span(trace)], now=T0)
    assert _store_errors(caplog) == []
    assert first.file_changes == second.file_changes == 0
    first.close()
    second.close()
