"""The embedded default store: one SQLite file in WAL mode, shared by threads and processes.

Connections live in a small pool that any thread borrows from for one transaction (SQLite
connections are not for concurrent use, and one per thread would churn file handles as threads
come and go). Writers serialize on SQLite's write lock (``BEGIN IMMEDIATE``, waiting up to
``busy_timeout``); readers never block in WAL mode. Several processes may open the same file: a
claim is one statement under the write lock, so two processes never lease the same job, and a
killed process's lease simply expires.

A database file deleted or replaced under a running process is noticed when a connection is
borrowed (the file's identity changed): the stale connections are dropped and a fresh file gets
the schema, instead of writes going into a ghost inode. What the old file held is gone from
this store, so each such change is logged once as an ERROR naming the path and counted in
:attr:`SQLiteStore.file_changes`.

Example::

    store = SQLiteStore("./spanjudge.db")
    store.write_spans(records)
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress

from spanjudge._store.sql import SpanStore
from spanjudge._store.sql_base import Cursor
from spanjudge.errors import ConfigError, StoreError

MEMORY = ":memory:"

logger = logging.getLogger("spanjudge.store")


# Idle connections kept for reuse; more are opened under a burst and closed afterwards.
_MAX_IDLE = 8

Identity = tuple[int, int]

_PRAGMA_NAME = re.compile(r"[a-z_]+")
_PRAGMA_VALUE = re.compile(r"-?[0-9]+|[A-Za-z_]+")


class SQLiteStore(SpanStore):
    """:class:`~spanjudge._store.SpanStore` on a SQLite file (or ``":memory:"``).

    ``busy_timeout`` (seconds) bounds how long a call waits for another writer (another thread
    or process) before it raises :class:`StoreError`. ``pragmas`` are applied to every
    connection (e.g. ``{"cache_size": -16000}``; ``{"max_page_count": n}`` caps the file size).
    ``file_changes`` counts the times the file was found deleted or replaced while open.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        pragmas: Mapping[str, int | str] | None = None,
    ) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.busy_timeout = busy_timeout
        self.pragmas = dict(pragmas or {})
        for name, value in self.pragmas.items():
            # Pragmas cannot take bound parameters: accept only plain names and values.
            if not _PRAGMA_NAME.fullmatch(name) or not _PRAGMA_VALUE.fullmatch(str(value)):
                raise ConfigError(f"unsupported SQLite pragma {name}={value!r}")
        self._memory = self.path == MEMORY
        self._lock = threading.Lock()
        self._idle: list[tuple[sqlite3.Connection, Identity | None]] = []
        self._known: Identity | None = None  # the file the schema was last checked on
        self.file_changes = 0
        self._closed = False
        # ":memory:" is private to one connection, so every thread shares it under a lock.
        self._memory_lock = threading.RLock()
        self._memory_conn: sqlite3.Connection | None = None
        if not self._memory:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            # a new store file is the owner's only (it holds trace content): SQLite gives its
            # -wal and -shm the database file's mode
            with suppress(FileExistsError):
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        self.migrate()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # ---------------------------------------------------------------- connections
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # borrowed by whichever thread needs it
        )
        try:
            if not self._memory:
                conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: durable against process crashes, fsync only at checkpoints.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            for name, value in self.pragmas.items():
                conn.execute(f"PRAGMA {name}={value}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _identity(self) -> Identity | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _borrow(self) -> tuple[sqlite3.Connection, Identity | None]:
        identity = self._identity()
        stale: list[sqlite3.Connection] = []
        with self._lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            found: tuple[sqlite3.Connection, Identity | None] | None = None
            while self._idle:
                conn, seen = self._idle.pop()
                if identity is not None and seen == identity:
                    found = (conn, seen)
                    break
                stale.append(conn)  # the file was deleted or replaced under it
            changed = False
            if found is None and identity != self._known:
                # Another file than the one we know (or none): every idle connection is stale,
                # and the file we open next needs the schema. (Forget the old identity: once
                # its last handle closes, a new file may get the same inode number.)
                stale.extend(conn for conn, _ in self._idle)
                self._idle.clear()
                # a file we were using, not the first open: said once, by this thread
                changed = self._known is not None
                self.file_changes += int(changed)
                self._known = None
        for conn in stale:
            _close(conn)
        if changed:
            self._log_change(deleted=identity is None)
        if found is not None:
            return found
        conn = self._open()
        opened = self._identity()
        if opened != self._known:
            # A new or replaced file: create the schema on it before anyone uses it.
            try:
                conn.execute("BEGIN IMMEDIATE")
                self.migrate_in(conn.cursor())
                conn.execute("COMMIT")
            except BaseException:
                _close(conn)
                raise
            self._known = opened
        return conn, opened

    def _log_change(self, *, deleted: bool) -> None:
        if deleted:
            logger.error(
                "SQLite store %s: the database file was deleted while in use; a new, empty one"
                " is created in its place (the spans, jobs and results it held are gone)",
                self.path,
            )
        else:
            # (measured: a -wal left beside the old file is applied to the new one, old rows
            # showing through, so the line says to stop the processes first)
            logger.error(
                "SQLite store %s: the database file was replaced by another file while in"
                " use; continuing on the file now at that path (stop every process using a"
                " store before replacing its file: SQLite applies the old file's -wal to it)",
                self.path,
            )

    def _give_back(self, conn: sqlite3.Connection, identity: Identity | None) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append((conn, identity))
                return
        _close(conn)

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Cursor]:
        if self._memory:
            with self._memory_lock:
                if self._closed:
                    raise StoreError(f"{self!r} is closed")
                if self._memory_conn is None:
                    self._memory_conn = self._open()
                yield from self._transaction(self._memory_conn, write)
            return
        try:
            conn, identity = self._borrow()
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        healthy = False
        try:
            yield from self._transaction(conn, write)
            healthy = True
        except StoreError as exc:
            healthy = _is_busy(exc.__cause__)
            raise
        except BaseException:
            healthy = True  # the caller's own error: rolled back, the connection is fine
            raise
        finally:
            if healthy:
                self._give_back(conn, identity)
            else:
                # I/O error, disk full, corrupted or vanished file: start afresh next call.
                _close(conn)

    def _transaction(self, conn: sqlite3.Connection, write: bool) -> Iterator[Cursor]:
        try:
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        try:
            yield cur
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        except BaseException:
            _rollback(conn)
            raise

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [conn for conn, _ in self._idle]
            self._idle.clear()
        for conn in idle:
            _close(conn)
        with self._memory_lock:
            if self._memory_conn is not None:
                _close(self._memory_conn)
                self._memory_conn = None


def _close(conn: sqlite3.Connection) -> None:
    with suppress(sqlite3.Error):
        conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    with suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _is_busy(exc: BaseException | None) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
