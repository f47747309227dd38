"""The embedded default store: one SQLite file in WAL mode, shared by threads and processes.

Each thread gets its own connection (SQLite connections are not for concurrent use); writers
serialize on SQLite's write lock (``BEGIN IMMEDIATE``, waiting up to ``busy_timeout``), readers
never block in WAL mode. Several processes may open the same file: a claim is one statement under
the write lock, so two processes never lease the same job, and a killed process's lease simply
expires.

A database file deleted or replaced under a running process is noticed on the next call (the
file's identity changed) and reopened, schema included, instead of writing into a ghost inode.

Example::

    store = SQLiteStore("./spanjudge.db")
    store.write_spans(records)
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from spanjudge.exporters.store.base import StoreError
from spanjudge.exporters.store.sql import Cursor, SqlStore

MEMORY = ":memory:"


class SQLiteStore(SqlStore):
    """:class:`~spanjudge.exporters.store.SpanStore` on a SQLite file (or ``":memory:"``).

    ``busy_timeout`` (seconds) bounds how long a call waits for another writer (another thread
    or process) before it raises :class:`StoreError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.busy_timeout = busy_timeout
        self._memory = self.path == MEMORY
        self._local = threading.local()
        self._registry_lock = threading.Lock()
        self._connections: set[sqlite3.Connection] = set()
        self._closed = False
        # ":memory:" is private to one connection, so every thread shares it under a lock.
        self._memory_lock = threading.RLock()
        self._memory_conn: sqlite3.Connection | None = None
        if not self._memory:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
        self.migrate()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # ---------------------------------------------------------------- connections
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # close() may run on another thread
        )
        try:
            if not self._memory:
                conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: durable against process crashes, fsync only at checkpoints.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        except BaseException:
            conn.close()
            raise
        with self._registry_lock:
            self._connections.add(conn)
        return conn

    def _discard(self, conn: sqlite3.Connection) -> None:
        with self._registry_lock:
            self._connections.discard(conn)
        with suppress(sqlite3.Error):
            conn.close()

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if self._memory:
            if self._memory_conn is None:
                self._memory_conn = self._open()
            return self._memory_conn
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        identity = self._identity()
        if conn is not None and identity is not None and identity == self._local.identity:
            return conn
        # First use on this thread, or the file was deleted/replaced under us: reopen.
        if conn is not None:
            self._local.conn = None
            self._discard(conn)
        conn = self._open()
        self._local.conn = conn
        self._local.identity = self._identity()
        if identity is None or getattr(self._local, "seen", False):
            # A new file: create the schema (on the connection we just stored).
            self.migrate()
        self._local.seen = True
        return conn

    def _drop_thread_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and not self._memory:
            self._local.conn = None
            self._discard(conn)

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Cursor]:
        if self._memory:
            with self._memory_lock:
                yield from self._transaction(write)
        else:
            yield from self._transaction(write)

    def _transaction(self, write: bool) -> Iterator[Cursor]:
        try:
            conn = self._connection()
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            self._drop_thread_connection()
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        try:
            yield cur
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            if not _is_busy(exc):
                # I/O error, disk full, corrupted or vanished file: start afresh next call.
                self._drop_thread_connection()
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        except BaseException:
            self._rollback(conn)
            raise

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def close(self) -> None:
        self._closed = True
        with self._registry_lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            with suppress(sqlite3.Error):
                conn.close()
        self._memory_conn = None


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
