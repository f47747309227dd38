"""The span log in SQL: spans in, settled traces and idle conversations out, retention.

Every write also keeps one ``traces`` row per trace and one ``conversations`` row per
conversation (first and last arrival, root ended, planned at), so settling is an indexed scan
instead of a look at every span.

A span new to a trace already planned is late: the trace settles again and is planned again
for it, and a conversation that gets a new turn after being planned goes idle again
(:mod:`~spanjudge._store.late_spans`).

Example::

    store.write_spans(records, now=t)
    store.mark_planned(traces=store.settled_traces(settle_seconds=10, now=t + 10), now=t + 10)
"""

from __future__ import annotations

from collections.abc import Sequence

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.columns import (
    SPAN_COLUMNS,
    SPAN_TYPES,
    clean_text,
    span_from_row,
    span_row,
)
from spanjudge._store.jobs import insert_jobs
from spanjudge._store.late_spans import LateQueries
from spanjudge._store.models import ORPHAN_SETTLE_FACTOR, JobSpec, OutboxEntry
from spanjudge._store.outbox import outbox_rows
from spanjudge._store.sql_base import IDS_PER_LIST, Cursor, SqlCore, wall

_HEX = "0123456789abcdef"


def mark_planned_in(
    store: SqlCore,
    cur: Cursor,
    *,
    traces: Sequence[str] = (),
    conversations: Sequence[str] = (),
    now: float,
    lock: str = "",
    arrived_before: float | None = None,
) -> None:
    """Mark traces and conversations planned inside the caller's transaction: one UPDATE per
    500 ids of each kind. ``lock`` (PostgreSQL: ``" FOR UPDATE"``) locks the rows in id order
    first, so two workers planning the same page cannot deadlock on them (SQLite holds its
    write lock for the whole transaction). ``arrived_before``: rows whose last span arrived
    later are left unplanned (a span came while the page was being planned)."""
    # PostgreSQL re-checks the condition on the row a concurrent write committed meanwhile
    guard = "" if arrived_before is None else " AND last_arrival <= ?"
    extra = () if arrived_before is None else (arrived_before,)
    for table, key, ids in (
        ("traces", "trace_id", traces),
        ("conversations", "conversation_id", conversations),
    ):
        # cleaned as the columns were written (a conversation id can hold anything)
        wanted = sorted({clean_text(i) or "" for i in ids})
        for start in range(0, len(wanted), IDS_PER_LIST):
            chunk = wanted[start : start + IDS_PER_LIST]
            marks = ", ".join("?" * len(chunk))
            rows = (
                f"SELECT {key} FROM {table} WHERE {key} IN ({marks}) ORDER BY {key}{lock}"
                if lock
                else marks
            )
            cur.execute(
                store.q(f"UPDATE {table} SET planned_at = ? WHERE {key} IN ({rows}){guard}"),
                (now, *chunk, *extra),
            )


class SpanQueries(LateQueries):
    """The span log over the shared SQL core (with the
    enrich-mode outbox entries a write may carry, and the late spans it finds)."""

    #: appended to a sub-select that locks rows before an UPDATE (PostgreSQL: ``FOR UPDATE``)
    row_lock = ""
    #: the spans table's key, the conflict target of a write (PostgreSQL's day partitions by
    #: start time need it in the key: ``trace_id, span_id, start_ns``)
    span_key = "trace_id, span_id"
    #: retention deletes expired spans and outbox entries row by row: the one path of plain
    #: tables (SQLite). PostgreSQL's are partitioned by day and retention drops whole days
    #: instead (:mod:`~spanjudge._store.partitions`), so its store sets this False.
    delete_rows = True

    def write_spans(
        self,
        spans: Sequence[SpanRecord],
        *,
        now: float | None = None,
        outbox: Sequence[OutboxEntry] = (),
    ) -> None:
        """Store finished spans; ``now`` is their arrival time (default: the wall clock).
        A span already stored (same trace id and span id) is kept as first written.
        ``outbox`` (enrich mode) entries are written in the same transaction, each once ever:
        a span delivered twice is forwarded once."""
        if not spans:
            return
        arrived = wall() if now is None else now
        self.before_write(spans, arrived)
        with self.transaction() as cur:
            self.write_spans_in(cur, spans, arrived, outbox)

    def before_write(self, spans: Sequence[SpanRecord], arrived: float) -> None:
        """What a backend does before a transaction that writes ``spans`` (PostgreSQL: make
        the day partitions they go to)."""

    def write_spans_in(
        self,
        cur: Cursor,
        spans: Sequence[SpanRecord],
        arrived: float,
        outbox: Sequence[OutboxEntry] = (),
    ) -> None:
        """:meth:`write_spans` inside the caller's write transaction."""
        if not spans:
            return
        # Sorted by key: concurrent writers take row locks in one order and cannot deadlock.
        spans = sorted(spans, key=lambda s: (s.trace_id, s.span_id))
        rows = [span_row(span, arrived) for span in spans]
        roots: dict[str, int] = {}
        conversations: set[str] = set()
        for span, row in zip(spans, rows, strict=True):
            ended = 1 if (not row[2] and span.end_time_unix_nano > 0) else 0
            roots[span.trace_id] = max(roots.get(span.trace_id, 0), ended)
            if row[14] is not None:
                conversations.add(row[14])
        trace_rows = [(t, arrived, arrived, roots[t]) for t in sorted(roots)]
        conversation_rows = [(c, arrived, arrived) for c in sorted(conversations)]
        g = self.greatest
        prepared = outbox_rows(outbox, arrived=arrived)
        # (SQLite: the rowid before the insert, to tell this write's rows; PostgreSQL: None)
        mark = self.outbox_mark(cur)
        self.insert_rows(
            cur,
            f"INSERT INTO spans ({SPAN_COLUMNS}, service_name, conversation_id, arrived_at)",
            SPAN_TYPES,
            rows,
            f" ON CONFLICT ({self.span_key}) DO NOTHING",
        )
        all_new = cur.rowcount == len(rows)  # (rows inserted, whichever way the dialect)
        self.insert_rows(
            cur,
            "INSERT INTO traces (trace_id, first_arrival, last_arrival, root_ended)",
            ("text", "real", "real", "int"),
            trace_rows,
            " ON CONFLICT (trace_id) DO UPDATE SET"
            f" last_arrival = {g}(traces.last_arrival, excluded.last_arrival),"
            f" root_ended = {g}(traces.root_ended, excluded.root_ended)",
        )
        if conversation_rows:
            self.insert_rows(
                cur,
                "INSERT INTO conversations (conversation_id, first_arrival, last_arrival)",
                ("text", "real", "real"),
                conversation_rows,
                " ON CONFLICT (conversation_id) DO UPDATE SET"
                f" last_arrival = {g}(conversations.last_arrival, excluded.last_arrival)",
            )
        self.reopen_planned(cur, spans, rows, arrived, mark, all_new=all_new)
        if outbox:
            self.write_outbox(cur, outbox, prepared, mark, all_new=all_new)

    def settled_traces(self, *, settle_seconds: float, now: float, limit: int = 500) -> list[str]:
        """Traces not planned yet whose root span has ended and whose last span arrived at or
        before ``now - settle_seconds``; a trace without a root settles after
        ``ORPHAN_SETTLE_FACTOR * settle_seconds``. Oldest arrival first."""
        rows = self.select(
            "SELECT trace_id FROM traces WHERE planned_at IS NULL AND last_arrival <= ?"
            " AND (root_ended = 1 OR last_arrival <= ?)"
            # Index order only: a tie-breaker column would sort the whole backlog.
            " ORDER BY last_arrival LIMIT ?",
            (now - settle_seconds, now - ORPHAN_SETTLE_FACTOR * settle_seconds, limit),
        )
        return [row[0] for row in rows]

    def busy_traces(self, *, max_delay_seconds: float, now: float, limit: int = 500) -> list[str]:
        """Traces not planned yet whose unplanned spans have waited longer than
        ``max_delay_seconds`` before ``now``, settled or not: the first span arrived before
        ``now - max_delay_seconds``, and so did the first one since the trace was last planned
        (its late note). Oldest first arrival first. What :meth:`enqueue_planned` takes as
        ``busy`` drops out: its note moves to the planning's ``busy_since``."""
        cutoff = now - max_delay_seconds
        rows = self.select(
            "SELECT t.trace_id FROM traces t LEFT JOIN late_traces l ON l.trace_id = t.trace_id"
            " WHERE t.planned_at IS NULL AND t.first_arrival < ?"
            " AND (l.since IS NULL OR l.since < ?)"
            " ORDER BY t.first_arrival LIMIT ?",
            (cutoff, cutoff, limit),
        )
        return [row[0] for row in rows]

    def idle_conversations(self, *, idle_seconds: float, now: float, limit: int = 500) -> list[str]:
        """Conversations not planned yet whose last span arrived at or before
        ``now - idle_seconds``. Oldest arrival first."""
        rows = self.select(
            "SELECT conversation_id FROM conversations WHERE planned_at IS NULL"
            " AND last_arrival <= ? ORDER BY last_arrival LIMIT ?",
            (now - idle_seconds, limit),
        )
        return [row[0] for row in rows]

    def mark_planned(
        self, *, traces: Sequence[str] = (), conversations: Sequence[str] = (), now: float
    ) -> None:
        """Take traces/conversations out of the settled/idle lists, until a new span arrives:
        a span new to a planned trace is recorded as late (:meth:`late_spans`) and the trace
        settles again; a new span carrying a planned conversation's id makes it idle again.
        A span delivered again (same ids) changes nothing."""
        self.enqueue_planned((), traces=traces, conversations=conversations, now=now)

    def enqueue_planned(
        self,
        jobs: Sequence[JobSpec],
        *,
        traces: Sequence[str] = (),
        conversations: Sequence[str] = (),
        now: float,
        arrived_before: float | None = None,
        replanned: Sequence[str] = (),
        busy: Sequence[str] = (),
        busy_since: float | None = None,
    ) -> int:
        """:meth:`enqueue_jobs` and ``mark_planned(traces=..., conversations=...)`` in one
        transaction, so a page of planned traces is written at once and a trace is never
        marked planned without its jobs (a crash loses both, and the page is planned again).
        ``arrived_before``: mark only the rows whose last span arrived at or before it (the
        settle or idle cutoff the page was read with), so a span that arrives while the page
        is planned leaves its trace or conversation to settle again instead of unseen.
        ``replanned``: traces planned again for their late spans, whose late-span records
        are cleared where the trace was marked. ``busy``: traces planned before they settled
        (:meth:`busy_traces`), not marked: their late note is set to ``busy_since``, so the
        spans that arrive from then on are planned again as late, and the trace leaves the busy
        list until its note is older than the bound again. Returns how many jobs were new."""
        if not jobs and not traces and not conversations and not busy:
            return 0
        with self.transaction() as cur:
            # jobs first: a crash between the two statements rolls both back, and nothing is
            # ever marked planned without its jobs
            enqueued = insert_jobs(self, cur, jobs, now=now)
            mark_planned_in(
                self,
                cur,
                traces=traces,
                conversations=conversations,
                now=now,
                lock=self.row_lock,
                arrived_before=arrived_before,
            )
            if replanned:
                self.clear_late(cur, replanned)
            if busy:
                self.note_late(cur, busy, since=wall() if busy_since is None else busy_since)
            return enqueued

    def trace_ids_with_prefix(self, prefix: str, *, limit: int = 2) -> list[str]:
        """Up to ``limit`` stored trace ids starting with ``prefix`` (hex, any case), in id
        order; none for an empty or non-hex prefix. Resolves the shortened ids people copy."""
        low = prefix.lower()
        if not low or low.strip(_HEX):
            return []
        # A range on the primary key, not LIKE: PostgreSQL's btree serves LIKE 'x%' only
        # under the C collation, and hex digits order the same way in every collation.
        where, args = "trace_id >= ?", [low]
        if low.strip("f"):  # "ff..." has no next prefix of its length: no upper bound
            where += " AND trace_id < ?"
            args.append(format(int(low, 16) + 1, f"0{len(low)}x"))
        rows = self.select(
            f"SELECT trace_id FROM traces WHERE {where} ORDER BY trace_id LIMIT ?", (*args, limit)
        )
        return [row[0] for row in rows]

    def trace_spans(self, trace_id: str) -> list[SpanRecord]:
        """All stored spans of a trace, by start time."""
        rows = self.select(
            f"SELECT {SPAN_COLUMNS} FROM spans WHERE trace_id = ? ORDER BY start_ns, span_id",
            (trace_id,),
        )
        return [span_from_row(row) for row in rows]

    def traces_spans(self, trace_ids: Sequence[str]) -> dict[str, list[SpanRecord]]:
        """The stored spans of several traces at once (one read per 500 ids), each trace's by
        start time; every id asked for is a key (an empty list when nothing is stored)."""
        wanted = sorted(set(trace_ids))
        found: dict[str, list[SpanRecord]] = {t: [] for t in trace_ids}
        with self.transaction(write=False) as cur:
            for start in range(0, len(wanted), IDS_PER_LIST):
                chunk = wanted[start : start + IDS_PER_LIST]
                cur.execute(
                    self.q(
                        f"SELECT {SPAN_COLUMNS} FROM spans WHERE trace_id IN"
                        f" ({', '.join('?' * len(chunk))}) ORDER BY trace_id, start_ns, span_id"
                    ),
                    chunk,
                )
                for row in cur.fetchall():
                    span = span_from_row(row)
                    found.setdefault(span.trace_id, []).append(span)
        return found

    def conversation_spans(self, conversation_id: str) -> list[SpanRecord]:
        """All spans of every trace that has a span carrying this conversation id, by start
        time (so a turn's retrievals and tool calls come along even without the id)."""
        rows = self.select(
            f"SELECT {SPAN_COLUMNS} FROM spans WHERE trace_id IN"
            " (SELECT DISTINCT trace_id FROM spans WHERE conversation_id = ?)"
            " ORDER BY start_ns, trace_id, span_id",
            (conversation_id,),
        )
        return [span_from_row(row) for row in rows]

    def targets_since(self, *, since: float, until: float) -> tuple[list[str], list[str]]:
        """Trace ids and conversation ids with spans that arrived in ``[since, until]``, planned
        or not (backfill)."""
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT trace_id FROM traces WHERE last_arrival >= ? AND first_arrival <= ?"
                    " ORDER BY first_arrival, trace_id"
                ),
                (since, until),
            )
            traces = [row[0] for row in cur.fetchall()]
            cur.execute(
                self.q(
                    "SELECT conversation_id FROM conversations WHERE last_arrival >= ?"
                    " AND first_arrival <= ? ORDER BY first_arrival, conversation_id"
                ),
                (since, until),
            )
            return traces, [row[0] for row in cur.fetchall()]

    def delete_older_than(self, cutoff: float) -> int:
        """Retention: delete spans and log events that arrived before ``cutoff`` and the
        trace/conversation rows last touched before it. Jobs and results are kept. Returns
        spans deleted."""
        with self.transaction() as cur:
            deleted = 0
            if self.delete_rows:
                cur.execute(self.q("DELETE FROM spans WHERE arrived_at < ?"), (cutoff,))
                deleted = max(cur.rowcount, 0)
                cur.execute(
                    self.q(
                        "DELETE FROM outbox WHERE forwarded_at IS NOT NULL AND forwarded_at < ?"
                        # a shared entry holds the bytes of its held spans until they are sent
                        " AND entry_id NOT IN (SELECT shared_id FROM outbox"
                        " WHERE forwarded_at IS NULL AND shared_id IS NOT NULL)"
                    ),
                    (cutoff,),
                )
            cur.execute(self.q("DELETE FROM late_traces WHERE since < ?"), (cutoff,))
            cur.execute(self.q("DELETE FROM traces WHERE last_arrival < ?"), (cutoff,))
            cur.execute(self.q("DELETE FROM conversations WHERE last_arrival < ?"), (cutoff,))
            return deleted
