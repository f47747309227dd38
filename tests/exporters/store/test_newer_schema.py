"""A store a newer release migrated further is refused with both versions, never written to.

Before, a database at schema version 99 was opened and written to silently: the migrations
loop simply had nothing to run. Now opening it raises a one-line StoreError naming the store,
its version and ours, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import StoreError
from tests.support.stores import POSTGRES_URL, StoreFactory, schema_name, stores_on

NEWER = 99


def _stamp(store: SpanStore, version: int) -> None:
    """Record ``version`` as applied, as a newer release's migrations would."""
    assert isinstance(store, SpanStore)
    with store.transaction() as cur:
        cur.execute(
            store.q("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)"),
            (version, 0.0),
        )


def _versions(store: SpanStore) -> list[int]:
    assert isinstance(store, SpanStore)
    with store.transaction(write=False) as cur:
        cur.execute("SELECT version FROM schema_version ORDER BY version")
        return [int(row[0]) for row in cur.fetchall()]


def _open(backend: str, path: Path, schema: str) -> SpanStore:
    """Opened directly: the test helpers take any StoreError for an unreachable server."""
    if backend == "sqlite":
        return SQLiteStore(path)
    from spanjudge._store.postgres import PostgresStore

    return PostgresStore(POSTGRES_URL, schema=schema, max_size=1, timeout=5.0)


def test_a_store_of_a_newer_schema_is_refused_naming_both_versions(
    backend: str, tmp_path: Path
) -> None:
    path, schema = tmp_path / "spans.db", schema_name()
    with stores_on(backend, path, schema) as make:
        first = make()
        _stamp(first, NEWER)
        before = _versions(first)

        with pytest.raises(StoreError) as refused:
            _open(backend, path, schema)

        message = str(refused.value)
        assert "\n" not in message
        assert f"schema version {NEWER}" in message
        assert f"up to {SCHEMA_VERSION}" in message and "newer spanjudge release" in message
        assert _versions(first) == before  # nothing written by the refused open


def test_a_sqlite_file_replaced_by_a_newer_store_is_refused_on_next_use(tmp_path: Path) -> None:
    path, newer = tmp_path / "spans.db", tmp_path / "newer.db"
    store = SQLiteStore(path)
    with SQLiteStore(newer) as other:
        _stamp(other, NEWER)
    for suffix in ("", "-wal", "-shm"):  # the old file and its journal go
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(newer, path)

    with pytest.raises(StoreError, match=f"schema version {NEWER}"):
        store.schema_version()
    store.close()


def test_the_current_version_opens(store_factory: StoreFactory) -> None:
    store_factory()
    assert store_factory().schema_version() == SCHEMA_VERSION
