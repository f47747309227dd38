"""The core every SQL query group builds on: a transaction, the dialect's words, batch writes.

Statements are written once with ``?`` placeholders; a backend that wants ``%s`` gets them
rewritten once and cached. Every value travels as a bound parameter: rule names, attribute names
and ids are data, never SQL text.

Example::

    class Counts(SqlCore):
        def spans(self) -> int:
            with self.transaction(write=False) as cur:
                cur.execute(self.q("SELECT COUNT(*) FROM spans WHERE arrived_at >= ?"), (0.0,))
                return int(cur.fetchone()[0])
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

IDS_PER_LIST = 500
"""Ids bound in one ``IN (...)`` list or one multi-row statement: far below every driver's
parameter limit."""


class Cursor(Protocol):
    """The DB-API subset both sqlite3 and psycopg cursors provide."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...
    def executemany(self, sql: Any, params: Any, /) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...


class SqlCore(ABC):
    """Transactions and dialect words; the query groups (spans, jobs, ...) are mixins on it."""

    #: scalar maximum of two values (SQLite ``MAX``, PostgreSQL ``GREATEST``)
    greatest = "MAX"
    #: appended to the claim sub-select (PostgreSQL: ``FOR UPDATE SKIP LOCKED``)
    claim_lock = ""
    #: index hint for the claim scan: walk open jobs in id order and stop at LIMIT, rather
    #: than sort every open job (SQLite's planner guesses otherwise without statistics)
    claim_index = " INDEXED BY jobs_open"
    #: placeholder style of the driver
    placeholder = "?"
    #: schema tokens
    types: ClassVar[dict[str, str]] = {
        "id_pk": "INTEGER PRIMARY KEY",
        "real": "REAL",
        "bigint": "INTEGER",
        "blob": "BLOB",
    }
    #: a condition on a row true when this transaction inserted it ("": SQLite, where rowids
    #: above the highest one before the insert tell, the write lock keeping others out)
    inserted_here = ""

    def __init__(self) -> None:
        self._sql_cache: dict[str, str] = {}

    # ---------------------------------------------------------------- hooks
    @abstractmethod
    def transaction(self, *, write: bool = True) -> AbstractContextManager[Cursor]:
        """A cursor inside one transaction: committed on success, rolled back on error. Driver
        errors leave it as :class:`StoreError`. ``write=True`` takes the write lock up front."""

    # ---------------------------------------------------------------- statements
    def q(self, sql: str) -> str:
        """``sql`` in the driver's placeholder style (cached)."""
        out = self._sql_cache.get(sql)
        if out is None:
            out = sql if self.placeholder == "?" else sql.replace("?", self.placeholder)
            self._sql_cache[sql] = out
        return out

    def insert_rows(
        self,
        cur: Cursor,
        head: str,
        types: Sequence[str],
        rows: Sequence[Sequence[Any]],
        tail: str,
    ) -> None:
        """``head`` + values + ``tail`` for many rows (``types``: text|int|bigint|real per
        column). Default: ``executemany``; a dialect may send one set-based statement."""
        values = ", ".join("?" * len(types))
        cur.executemany(self.q(f"{head} VALUES ({values}){tail}"), rows)

    @staticmethod
    def where(*filters: tuple[str, Any]) -> tuple[str, list[Any]]:
        """`` WHERE`` joining the ``(fragment, value)`` filters whose value is not None (fixed
        fragments such as ``"rule = ?"``; the values become parameters), and the values."""
        chosen = [(fragment, value) for fragment, value in filters if value is not None]
        clause = " AND ".join(fragment for fragment, _ in chosen)
        return (f" WHERE {clause}" if chosen else ""), [value for _, value in chosen]

    def select(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Every row one read-only statement returns."""
        with self.transaction(write=False) as cur:
            cur.execute(self.q(sql), params)
            return cur.fetchall()

    def update_each(self, *updates: tuple[str, Any, Sequence[Any]]) -> None:
        """For each ``(sql, value, keys)``, run ``sql`` (an UPDATE taking ``value`` then one key)
        once per distinct key, all in one transaction; nothing at all when every ``keys`` is
        empty. Keys go in sorted order: concurrent writers lock rows in one order and cannot
        deadlock."""
        updates = tuple(update for update in updates if update[2])
        if not updates:
            return
        with self.transaction() as cur:
            for sql, value, keys in updates:
                cur.executemany(self.q(sql), [(value, key) for key in sorted(set(keys))])


def wall() -> float:
    """The wall clock, for the calls whose caller passed no time."""
    return time.time()
