"""Stores for the tests: SQLite in a temp file, PostgreSQL in a fresh schema dropped afterwards.

PostgreSQL is ``$SPANJUDGE_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
which ``bash scripts/test`` provisions). When it is unreachable a test fails with a message saying
so, never skips: a store suite that silently drops its production backend would prove nothing::

    with stores_on("postgresql", tmp_path / "spans.db", schema_name()) as make:
        first, second = make(), make()  # two views of ONE database
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import StoreError

if TYPE_CHECKING:
    from spanjudge._store.postgres import PostgresStore

POSTGRES_URL = os.environ.get(
    "SPANJUDGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
BACKENDS = ["sqlite", "postgresql"]

StoreFactory = Callable[[], SpanStore]


def postgres_unreachable(exc: Exception) -> NoReturn:
    pytest.fail(
        f"PostgreSQL is not reachable at {POSTGRES_URL} ({exc}): run `bash scripts/test`, which"
        " installs and starts it, or point SPANJUDGE_TEST_POSTGRES_URL at a server; these tests"
        " never skip.",
        pytrace=False,
    )


def schema_name(prefix: str = "spanjudge_test") -> str:
    """A schema no other test (or earlier run) uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def open_postgres(schema: str, max_size: int = 4) -> PostgresStore:
    """A PostgresStore on ``schema`` of the test server, or a clear failure."""
    # imported here: psycopg is loaded only by the tests that use PostgreSQL
    from spanjudge._store.postgres import PostgresStore

    try:
        return PostgresStore(POSTGRES_URL, schema=schema, max_size=max_size, timeout=5.0)
    except StoreError as exc:
        postgres_unreachable(exc)


def drop_schema(schema: str) -> None:
    """Drop ``schema`` through a connection of its own, so it works after the test closed its
    stores (a restart test does)."""
    from spanjudge._store.postgres import PostgresStore

    with contextlib.suppress(StoreError):
        fresh = PostgresStore(POSTGRES_URL, schema=schema, max_size=1, timeout=5.0)
        try:
            fresh.drop_schema()
        finally:
            fresh.close()


@contextlib.contextmanager
def stores_on(backend: str, path: Path, schema: str) -> Iterator[StoreFactory]:
    """A factory of stores on one database (the SQLite file ``path`` or the PostgreSQL
    ``schema``): each call is another connection's view of it; all are closed and the schema
    dropped afterwards."""
    opened: list[SpanStore] = []

    def make() -> SpanStore:
        store = SQLiteStore(path) if backend == "sqlite" else open_postgres(schema)
        opened.append(store)
        return store

    try:
        yield make
    finally:
        if backend == "postgresql" and opened:
            drop_schema(schema)
        for store in opened:
            with contextlib.suppress(StoreError):
                store.close()


@contextlib.contextmanager
def sqlite_store(path: Path) -> Iterator[SpanStore]:
    """A new SQLite store in the file ``path``, closed on exit."""
    opened = SQLiteStore(str(path))
    try:
        yield opened
    finally:
        opened.close()
