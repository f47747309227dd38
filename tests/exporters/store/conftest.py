"""Store fixtures: every behavioural test runs on SQLite (a temp file) and PostgreSQL.

PostgreSQL tests use ``$SPANJUDGE_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), each in a fresh schema dropped afterwards. When the
server is unreachable they fail with a message saying so: a store suite that silently skips its
production backend would prove nothing.

``v2_store_factory`` opens a database the previous release's code created, for the schema
compatibility tests.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from spanjudge.exporters.store import SpanStore, SQLiteStore, StoreError

POSTGRES_URL = os.environ.get(
    "SPANJUDGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)

StoreFactory = Callable[[], SpanStore]

FIXTURES = Path(__file__).parent / "fixtures"


def _unreachable(exc: Exception) -> NoReturn:
    pytest.fail(
        f"PostgreSQL is not reachable at {POSTGRES_URL} ({exc}): run `bash scripts/test`, which"
        " installs and starts it, or point SPANJUDGE_TEST_POSTGRES_URL at a server; these tests"
        " never skip.",
        pytrace=False,
    )


def _postgres_factory(schema: str) -> StoreFactory:
    from spanjudge.exporters.store.postgres import PostgresStore

    def make() -> SpanStore:
        try:
            return PostgresStore(POSTGRES_URL, schema=schema, max_size=4, timeout=5.0)
        except StoreError as exc:
            _unreachable(exc)

    return make


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.contextmanager
def _stores_on(backend: str, path: Path, schema: str) -> Iterator[StoreFactory]:
    """A factory of stores on one database (the SQLite file ``path`` or the PostgreSQL
    ``schema``), all closed and the schema dropped afterwards."""
    opened: list[SpanStore] = []
    inner = (lambda: SQLiteStore(path)) if backend == "sqlite" else _postgres_factory(schema)

    def make() -> SpanStore:
        store = inner()
        opened.append(store)
        return store

    yield make
    if backend == "postgresql" and opened:
        from spanjudge.exporters.store.postgres import PostgresStore

        first = opened[0]
        assert isinstance(first, PostgresStore)
        with contextlib.suppress(StoreError):
            first.drop_schema()
    for store in opened:
        store.close()


def _schema_name() -> str:
    return f"spanjudge_test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store_factory(backend: str, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens stores on ONE database: each call is another connection/process view of it."""
    with _stores_on(backend, tmp_path / "spans.db", _schema_name()) as make:
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
    path, schema = tmp_path / "v2.db", _schema_name()
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
            _unreachable(exc)
    with _stores_on(backend, path, schema) as make:
        yield make
