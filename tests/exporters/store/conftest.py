"""Store fixtures: every behavioural test runs on SQLite (a temp file) and PostgreSQL.

PostgreSQL tests each get a fresh schema of the test server, dropped afterwards; when it is
unreachable they fail, never skip (tests/support/stores.py opens both backends).

``v2_store_factory`` opens a database the previous release's code created, for the schema
compatibility tests.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanjudge._store.sql import SpanStore
from tests.support.stores import (
    BACKENDS,
    POSTGRES_URL,
    StoreFactory,
    postgres_unreachable,
    schema_name,
    stores_on,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_factory(backend: str, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens stores on ONE database: each call is another connection/process view of it."""
    with stores_on(backend, tmp_path / "spans.db", schema_name()) as make:
        yield make


@pytest.fixture
def store(store_factory: StoreFactory) -> SpanStore:
    return store_factory()


# The schema name the PostgreSQL dump in fixtures/ was taken from.
V2_DUMP_SCHEMA = "spanjudge_v2_fixture"


@pytest.fixture
def v2_store_factory(backend: str, tmp_path: Path) -> Iterator[StoreFactory]:
    """Like ``store_factory``, on a schema-v2 database the code before the split of sql.py made
    (fixtures/schema_v2.*.sql), loaded as it was dumped."""
    path, schema = tmp_path / "v2.db", schema_name()
    dump = (FIXTURES / f"schema_v2.{backend}.sql").read_text(encoding="utf-8")
    if backend == "sqlite":
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.executescript(dump)
    else:
        import psycopg

        try:
            with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
                conn.execute(dump.replace(V2_DUMP_SCHEMA, schema).encode())
        except psycopg.OperationalError as exc:
            postgres_unreachable(exc)
    with stores_on(backend, path, schema) as make:
        yield make
