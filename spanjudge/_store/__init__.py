"""Span stores: where spans, evaluation jobs and results live between the app and the judge.

``open_store()`` picks the backend from a URL: SQLite (embedded default, one file) or PostgreSQL
(several workers sharing one database).

Example::

    from spanjudge._store import open_store

    store = open_store("sqlite:///./spanjudge.db")   # or "postgresql://user@host/db"
    print(store.stats(now=time.time()))
"""

from __future__ import annotations

import os
from typing import Any

from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import ConfigError

STORE_URL_ENV = "SPANJUDGE_STORE_URL"
DEFAULT_STORE_URL = "sqlite:///./spanjudge.db"


def open_store(url: str | None = None, **options: Any) -> SpanStore:
    """Open (and create or migrate) the store a URL names.

    - ``None``: ``$SPANJUDGE_STORE_URL``, else ``sqlite:///./spanjudge.db``;
    - ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, a plain file path, or
      ``":memory:"`` (one private in-memory database, for tests);
    - ``postgresql://...`` / ``postgres://...``: :class:`PostgresStore`.

    Extra keyword ``options`` go to the backend's constructor (e.g. ``busy_timeout`` for
    SQLite, ``schema`` or ``max_size`` for PostgreSQL).

    Example::

        store = open_store("postgresql://postgres@127.0.0.1:5432/spanjudge", max_size=4)
    """
    if url is None:
        url = os.environ.get(STORE_URL_ENV) or DEFAULT_STORE_URL
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        from spanjudge._store.postgres import PostgresStore

        return PostgresStore(url.replace("postgresql+psycopg://", "postgresql://", 1), **options)
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        # sqlite:///x.db -> "x.db", sqlite:////abs/x.db -> "/abs/x.db", sqlite://:memory:
        if path.startswith("/"):
            path = path[1:]
        return SQLiteStore(path or ":memory:", **options)
    if "://" in url:
        raise ConfigError(f"unsupported store URL scheme: {url.split('://', 1)[0]!r}")
    return SQLiteStore(url, **options)
