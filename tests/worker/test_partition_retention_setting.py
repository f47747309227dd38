"""PostgreSQL retention has one path, the drop of whole days: the worker's store drops them and
deletes no span row of a day one by one; the old switch to row deletes is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge.errors import ConfigError
from spanjudge.settings import load_settings
from spanjudge.worker.preflight import open_worker_store
from tests.support.stores import POSTGRES_URL, drop_schema, schema_name


def test_the_worker_opens_postgresql_dropping_days() -> None:
    schema = schema_name("partret")
    store = open_worker_store(load_settings(None, store_url=POSTGRES_URL, store_schema=schema))
    try:
        assert store.delete_rows is False
    finally:
        store.close()
        drop_schema(schema)


def test_the_row_delete_switch_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="store_partition_retention"):
        load_settings(None, store_url=POSTGRES_URL, store_partition_retention=False)


def test_a_sqlite_store_deletes_rows(tmp_path: Path) -> None:
    store = open_worker_store(load_settings(None, store_url=f"sqlite:///{tmp_path}/s.db"))
    try:  # a single file: rows are deleted, there is nothing to drop
        assert store.delete_rows is True
    finally:
        store.close()
