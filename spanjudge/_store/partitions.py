"""Day partitions of the PostgreSQL ``spans`` and ``outbox`` tables, made on demand and dropped
by retention.

``spans`` is partitioned by the span's own start time (``start_ns``), so a span delivered again
later lands in the partition it was first stored in and its key (``trace_id, span_id,
start_ns``) still tells it is a repeat. ``outbox`` is partitioned by the arrival time of the
write (``arrived_at``): an entry is written once, by the write that stored its spans first, and a
shared entry and the held rows pointing into it share that arrival, so they share a partition.

Partitions are named for their UTC day (``spans_p20261128``, ``outbox_p20261128``) and created
before a write needs them (:func:`write_days`: the write's day, the next, and its spans' start
days up to a week back), under an advisory lock so several workers never race on one; a process
remembers the ones it made or saw. Rows of any other day go to the default partition
(``spans_default``); a day's partition made later takes its rows out of it.

Retention has one path, the drop: a partition whose day is wholly before the cutoff goes when
nothing in it is still needed (no span arrived at or after the cutoff; no outbox entry
unforwarded or forwarded since); one still needed is left whole for a later pass (a late span
keeps its day until that span is past the horizon too). Rows are deleted one by one only in the
default partition, the case a drop cannot serve: its rows belong to no day.

Example::

    parts = Partitions(store.transaction)
    parts.detect()
    parts.ensure(write_days([span.start_time_unix_nano], arrived_at=t))
    expired = parts.expire(cutoff=t - 7 * DAY_SECONDS)  # .dropped, .kept, .spans
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from psycopg import errors, sql

from spanjudge._store.sql_base import Cursor
from spanjudge.errors import StoreError

DAY_SECONDS = 86_400
DAY_NS = DAY_SECONDS * 1_000_000_000

# Spans that started up to this many days before they arrived get their day's partition made;
# older start times go to the default partition (see write_days).
PAST_DAYS = 7

# Creating and dropping partitions take this advisory lock (any constant every spanjudge
# process shares, distinct from the migration lock's).
PARTITION_LOCK_KEY = 0x5A4A_0002

# A partition to drop smaller than this is counted row by row (a cheap scan); a larger one by
# the server's statistics, so a drop costs the same at any size.
_COUNT_EXACTLY_BELOW = 8 * 1024 * 1024

# How long making or dropping a partition waits for the table lock before giving up until the
# next write or pass (the writers and readers of the table hold a weaker lock for the length of
# their transaction, and every newcomer queues behind a waiting DDL statement).
_LOCK_TIMEOUT = "2s"

_NAME = re.compile(r"^(spans|outbox)_p(\d{8})$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

Transaction = Callable[[], AbstractContextManager[Cursor]]


def span_day(start_ns: int) -> int:
    """The day (since 1970-01-01 UTC) whose ``spans`` partition holds a span starting then."""
    return start_ns // DAY_NS


def arrival_day(arrived_at: float) -> int:
    """The day whose ``outbox`` partition holds an entry written at ``arrived_at`` (seconds),
    matching the server's routing exactly at a day's edge (a float division may round up)."""
    day = math.floor(arrived_at / DAY_SECONDS)
    if day * DAY_SECONDS > arrived_at:
        day -= 1
    elif (day + 1) * DAY_SECONDS <= arrived_at:
        day += 1
    return day


def write_days(starts_ns: Iterable[int], arrived_at: float) -> dict[str, set[int]]:
    """The partitions a write at ``arrived_at`` makes sure of: its day and the next for both
    tables (ahead of the writes to come), and the start days of its spans back to
    :data:`PAST_DAYS` before it. A span starting further off (a late one, a clock far wrong, a
    start of 0) goes to the default partition: no client can make the store create a table
    per day of its choosing."""
    today = arrival_day(arrived_at)
    ahead = {today, today + 1}
    starts = {span_day(start) for start in starts_ns}
    return {
        "spans": ahead | {d for d in starts if today - PAST_DAYS <= d <= today + 1},
        "outbox": ahead,
    }


def partition_name(table: str, day: int) -> str:
    """``spans_p20261128``: the table and the partition's UTC day."""
    return f"{table}_p{(_EPOCH + timedelta(days=day)):%Y%m%d}"


def _bounds(table: str, day: int) -> tuple[int, int]:
    scale = DAY_NS if table == "spans" else DAY_SECONDS
    return day * scale, (day + 1) * scale


def create_statement(table: str, day: int) -> sql.Composed:
    """``CREATE TABLE IF NOT EXISTS`` of one day's partition of ``table``."""
    low, high = _bounds(table, day)
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})"
    ).format(
        sql.Identifier(partition_name(table, day)),
        sql.Identifier(table),
        sql.Literal(low),
        sql.Literal(high),
    )


@dataclass
class Expired:
    """What one retention pass did to the partitioned tables."""

    #: partitions dropped whole, by name
    dropped: list[str] = field(default_factory=list)
    #: spans removed (dropped partitions: estimated from statistics when large)
    spans: int = 0
    #: partitions past the cutoff kept because something in them is still needed
    kept: list[str] = field(default_factory=list)


class Partitions:
    """The partitions one store process knows exist, and the statements that make and drop
    them; each call runs in transactions of its own from ``transaction``."""

    def __init__(self, transaction: Transaction) -> None:
        self._transaction = transaction
        self._known: set[tuple[str, int]] = set()
        #: which of spans and outbox are partitioned (read by :meth:`detect` after migrating;
        #: none before, or on a schema an older release left)
        self.tables: frozenset[str] = frozenset()

    def detect(self) -> None:
        """Read which tables the schema partitions."""
        with self._transaction() as cur:
            cur.execute(
                "SELECT t FROM unnest(ARRAY['spans', 'outbox']) AS t"
                " JOIN pg_class c ON c.oid = to_regclass(t) WHERE c.relkind = 'p'"
            )
            self.tables = frozenset(row[0] for row in cur.fetchall())

    def ensure(self, days: Mapping[str, Iterable[int]]) -> None:
        """Create the partitions of these days (per table) that this process has not seen yet:
        one short transaction, nothing when all are known (the usual write). When the table
        lock does not come within the lock timeout (a long transaction reads the table), none
        is made this time: the rows go to the default partition and the next write tries
        again, rather than every writer queueing behind the wait."""
        wanted = {(t, d) for t, ds in days.items() if t in self.tables for d in ds}
        missing = sorted(wanted - self._known)
        if not missing:
            return
        try:
            with self._transaction() as cur:
                cur.execute("SELECT set_config('lock_timeout', %s, true)", (_LOCK_TIMEOUT,))
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (PARTITION_LOCK_KEY,))
                for table, day in missing:
                    cur.execute("SELECT to_regclass(%s)", (partition_name(table, day),))
                    if cur.fetchone()[0] is None:
                        _create(cur, table, day)
        except StoreError as exc:
            if not isinstance(exc.__cause__, errors.LockNotAvailable):
                raise
            return
        self._known.update(missing)

    def existing(self, cur: Cursor, table: str) -> list[tuple[int, str]]:
        """The day partitions of ``table`` (in the connection's search path), by day."""
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%s)",
            (table,),
        )
        found = []
        for (name,) in cur.fetchall():
            match = _NAME.match(name)
            if match and match.group(1) == table:
                when = datetime.strptime(match.group(2), "%Y%m%d").replace(tzinfo=timezone.utc)
                found.append(((when - _EPOCH).days, name))
        return sorted(found)

    def expire(self, cutoff: float) -> Expired:
        """Retention on whole partitions: each one whose day ended at or before ``cutoff`` is
        dropped when nothing in it is needed any more, else left for a later pass. Partitions
        still in the horizon are left alone; the default partition loses its expired rows."""
        out = Expired()
        if not self.tables:
            return out
        with self._transaction() as cur:
            candidates = [
                (table, day, name)
                for table in sorted(self.tables)
                for day, name in self.existing(cur, table)
                if _bounds(table, day)[1] <= _horizon(table, cutoff)
            ]
        with self._transaction() as cur:  # the odd days no partition is made for
            for table in sorted(self.tables):
                out.spans += _delete_expired_rows(cur, table, f"{table}_default", cutoff)
        for table, day, name in candidates:
            try:
                self._expire_one(out, table, name, cutoff)
            except StoreError as exc:
                if not isinstance(exc.__cause__, errors.LockNotAvailable):
                    raise
                out.kept.append(name)  # busy: the next pass tries again
            self._known.discard((table, day))
        return out

    def _expire_one(self, out: Expired, table: str, name: str, cutoff: float) -> None:
        with self._transaction() as cur:
            cur.execute("SELECT set_config('lock_timeout', %s, true)", (_LOCK_TIMEOUT,))
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (PARTITION_LOCK_KEY,))
            if _needed(cur, table, name, cutoff):
                out.kept.append(name)  # dropped whole by a later pass
                return
            spans = _rows(cur, name) if table == "spans" else 0
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        out.spans += spans
        out.dropped.append(name)


def _create(cur: Cursor, table: str, day: int) -> None:
    """Make one day's partition, moving into it the rows of that day the default partition
    holds (PostgreSQL refuses a partition whose rows sit in the default one)."""
    low, high = _bounds(table, day)
    key = "start_ns" if table == "spans" else "arrived_at"
    default = sql.Identifier(f"{table}_default")
    cur.execute(
        sql.SQL(
            "CREATE TEMP TABLE spanjudge_moving ON COMMIT DROP AS WITH gone AS"
            " (DELETE FROM {} WHERE {} >= %s AND {} < %s RETURNING *) SELECT * FROM gone"
        ).format(default, sql.Identifier(key), sql.Identifier(key)),
        (low, high),
    )
    cur.execute(create_statement(table, day))
    cur.execute(
        sql.SQL("INSERT INTO {} SELECT * FROM spanjudge_moving").format(sql.Identifier(table))
    )
    cur.execute("DROP TABLE spanjudge_moving")


def _horizon(table: str, cutoff: float) -> float:
    """``cutoff`` (seconds) on the scale of ``table``'s partition key."""
    return cutoff * 1_000_000_000 if table == "spans" else cutoff


def _needed(cur: Cursor, table: str, name: str, cutoff: float) -> bool:
    """Whether a partition past the cutoff still holds a row retention keeps: a span that
    arrived at or after the cutoff (a late span, whose trace may be planned again); an outbox
    entry not forwarded yet or forwarded since, or a shared entry an unforwarded held row
    elsewhere still points into."""
    part = sql.Identifier(name)
    if table == "spans":
        query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE arrived_at >= %s)").format(part)
        cur.execute(query, (cutoff,))
        return bool(cur.fetchone()[0])
    query = sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM {p} WHERE forwarded_at IS NULL)"
        " OR EXISTS (SELECT 1 FROM {p} WHERE forwarded_at >= %s)"
        " OR EXISTS (SELECT 1 FROM outbox o WHERE o.forwarded_at IS NULL"
        " AND o.shared_id IS NOT NULL AND o.shared_id IN (SELECT entry_id FROM {p}))"
    ).format(p=part)
    cur.execute(query, (cutoff,))
    return bool(cur.fetchone()[0])


def _delete_expired_rows(cur: Cursor, table: str, name: str, cutoff: float) -> int:
    """Row deletes, on the default partition only: its rows (start times far from their
    arrival) belong to no day, so no drop can take them. Returns spans deleted."""
    part = sql.Identifier(name)
    if table == "spans":
        cur.execute(sql.SQL("DELETE FROM {} WHERE arrived_at < %s").format(part), (cutoff,))
        return max(cur.rowcount, 0)
    cur.execute(
        sql.SQL(
            "DELETE FROM {} WHERE forwarded_at IS NOT NULL AND forwarded_at < %s"
            " AND entry_id NOT IN (SELECT shared_id FROM outbox"
            " WHERE forwarded_at IS NULL AND shared_id IS NOT NULL)"
        ).format(part),
        (cutoff,),
    )
    return 0


def _rows(cur: Cursor, name: str) -> int:
    """Rows in a partition about to be dropped: counted when it is small, else the server's
    estimate (live tuples), so the cost does not grow with it."""
    cur.execute(
        "SELECT pg_relation_size(c.oid), GREATEST(c.reltuples, COALESCE(s.n_live_tup, 0))"
        " FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
        " WHERE c.oid = to_regclass(%s)",
        (name,),
    )
    size, estimate = cur.fetchone()
    if size < _COUNT_EXACTLY_BELOW:
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name)))
        return int(cur.fetchone()[0])
    return int(estimate)
