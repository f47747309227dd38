"""Store fixtures: every behavioural test runs on SQLite (a temp file) and PostgreSQL.

PostgreSQL tests use ``$SPANJUDGE_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), each in a fresh schema dropped afterwards. When the
server is unreachable they fail with a message saying so: a store suite that silently skips its
production backend would prove nothing.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spanjudge.exporters.store import SpanStore, SQLiteStore, StoreError

POSTGRES_URL = os.environ.get(
    "SPANJUDGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)

StoreFactory = Callable[[], SpanStore]


def _postgres_factory(schema: str) -> StoreFactory:
    from spanjudge.exporters.store.postgres import PostgresStore

    def make() -> SpanStore:
        try:
            return PostgresStore(POSTGRES_URL, schema=schema, max_size=4, timeout=5.0)
        except StoreError as exc:
            pytest.fail(
                f"PostgreSQL is not reachable at {POSTGRES_URL} ({exc}). Start it (.ci/run does)"
                " or point SPANJUDGE_TEST_POSTGRES_URL at a server; these tests never skip.",
                pytrace=False,
            )

    return make


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_factory(backend: str, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens stores on ONE database: each call is another connection/process view of it."""
    opened: list[SpanStore] = []
    if backend == "sqlite":
        path = tmp_path / "spans.db"

        def make() -> SpanStore:
            store = SQLiteStore(path)
            opened.append(store)
            return store

    else:
        schema = f"spanjudge_test_{uuid.uuid4().hex[:12]}"
        inner = _postgres_factory(schema)

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


@pytest.fixture
def store(store_factory: StoreFactory) -> SpanStore:
    return store_factory()
