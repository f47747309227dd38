"""The worker's store_partition_retention setting reaches the PostgreSQL store it opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge.settings import load_settings
from spanjudge.worker.preflight import open_worker_store
from tests.support.stores import POSTGRES_URL, drop_schema, schema_name


@pytest.mark.parametrize("setting", [True, False])
def test_the_worker_opens_postgresql_with_the_retention_it_is_told(setting: bool) -> None:
    schema = schema_name("partret")
    settings = load_settings(
        None, store_url=POSTGRES_URL, store_schema=schema, store_partition_retention=setting
    )
    store = open_worker_store(settings)
    try:
        # partition retention: span and outbox rows are never deleted one by one
        assert store.delete_rows is (not setting)  # type: ignore[attr-defined]
    finally:
        store.close()
        drop_schema(schema)


def test_partition_retention_is_on_by_default() -> None:
    assert load_settings(None, store_url=POSTGRES_URL).store_partition_retention is True


def test_a_sqlite_store_ignores_the_setting(tmp_path: Path) -> None:
    settings = load_settings(None, store_url=f"sqlite:///{tmp_path}/s.db")
    store = open_worker_store(settings)
    try:  # a single file: rows are deleted, there is nothing to drop
        assert store.delete_rows is True  # type: ignore[attr-defined]
    finally:
        store.close()
