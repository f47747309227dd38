"""The one SQL store both backends share; only connections and a few dialect words differ.

:class:`SpanStore` composes the query groups, each a mixin over :class:`~.core.SqlCore` in its
own module: ``spans`` (the span log), ``holds`` (spans held for their conversation), ``logs``
(content log events), ``jobs``, ``results``, ``outbox``, ``feedback``, ``judge_cache``,
``stats`` and ``summaries``. The schema and its migrations live in ``schema``; row <-> record
conversion in ``columns``. A backend
subclass supplies ``transaction()``, ``close()`` and its dialect words.

Example::

    class MemoryStore(SpanStore):
        def transaction(self, *, write: bool = True) -> AbstractContextManager[Cursor]: ...
        def close(self) -> None: ...
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TypeVar

from spanjudge._store.feedback import FeedbackQueries
from spanjudge._store.holds import HoldQueries
from spanjudge._store.jobs import JobQueries
from spanjudge._store.judge_cache import JudgeCacheQueries
from spanjudge._store.logs import LogQueries
from spanjudge._store.outbox import OutboxQueries
from spanjudge._store.results import ResultQueries
from spanjudge._store.schema import (
    MIGRATIONS,
    apply_migrations,
    current_version,
)
from spanjudge._store.sql_base import Cursor
from spanjudge._store.stats import StatsQueries
from spanjudge._store.summaries import SummaryQueries
from spanjudge.errors import StoreError

__all__ = ["SpanStore"]

_Store = TypeVar("_Store", bound="SpanStore")


class SpanStore(
    HoldQueries,
    LogQueries,
    JobQueries,
    ResultQueries,
    OutboxQueries,
    FeedbackQueries,
    JudgeCacheQueries,
    StatsQueries,
    SummaryQueries,
):
    """The whole store: spans and their content log events in, settled targets and leased
    jobs out, results kept exactly once, the enrich-mode outbox, human labels and the judge
    cache. ``open_store()`` returns one.

    One class over a DB-API connection; a backend subclass supplies transactions and its
    dialect words: :class:`~spanjudge._store.sqlite.SQLiteStore` (default, embedded) and
    :class:`~spanjudge._store.postgres.PostgresStore` (several workers on one database).

    Example::

        with open_store("sqlite:///./spanjudge.db") as store:
            print(store.schema_version(), store.stats(now=time.time()).pending)
    """

    #: which dialect-only migration statements apply (schema.apply_migrations)
    dialect = "sqlite"

    # ---------------------------------------------------------------- schema
    def _migration_lock(self, cur: Cursor) -> None:
        """Serialize concurrent migrations (SQLite: the write transaction already does)."""

    def migrate(self) -> None:
        """Create or upgrade the schema to the last version in :data:`MIGRATIONS`."""
        with self.transaction() as cur:
            self.migrate_in(cur)

    def migrate_in(self, cur: Cursor) -> None:
        """Run the pending migrations inside the caller's (write) transaction. A database a
        newer release migrated further is refused with :class:`StoreError`: this code would
        write rows that release does not expect."""
        self._migration_lock(cur)
        # MIGRATIONS is read from this module at call time, so a test can stand in the list a
        # later release would ship.
        apply_migrations(cur, MIGRATIONS, types=self.types, q=self.q, dialect=self.dialect)
        found, known = current_version(cur), len(MIGRATIONS)
        if found > known:
            raise StoreError(
                f"{self!r} has schema version {found}, from a newer spanjudge release; this one"
                f" knows versions up to {known}: upgrade spanjudge, or use another store"
            )

    def schema_version(self) -> int:
        """The schema version the database is at."""
        with self.transaction(write=False) as cur:
            return current_version(cur)

    # ---------------------------------------------------------------- retention
    def delete_older_than(self, cutoff: float) -> int:
        # spans and log events age alike; a log event outlives its span only by its own
        # arrival time (it arrived later)
        """Retention: delete spans and log events that arrived before ``cutoff`` and the
        trace/conversation rows last touched before it. Jobs and results are kept. Returns
        spans deleted."""
        deleted = super().delete_older_than(cutoff)
        self._delete_logs_older_than(cutoff)
        return deleted

    # ---------------------------------------------------------------- lifetime
    @abstractmethod
    def close(self) -> None:
        """Close connections. Further calls raise :class:`StoreError`."""

    def __enter__(self: _Store) -> _Store:
        """The store itself; leaving the block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
