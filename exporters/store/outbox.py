"""The enrich-mode outbox in SQL: entries written with their spans, released, leased, forwarded.

Example::

    store.release_held(now=t)
    claim = store.claim_outbox(owner=token, limit=512, lease_seconds=30, now=t)
    store.mark_forwarded([item.entry_id for item in claim.items], now=t)
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from typing import Any

from spanjudge.exporters.otlp_wire import request_body
from spanjudge.exporters.store.base import OutboxClaim, OutboxEntry, OutboxItem
from spanjudge.exporters.store.core import Cursor, SqlCore
from spanjudge.exporters.store.rows import (
    SPAN_COLUMNS_S,
    clean_text,
    record_from_json,
    span_from_row,
)
from spanjudge.exporters.store.schema import OPEN_JOBS

Key = tuple[str, str]
_CHUNK = 500  # ids per IN (...) list


Passing = tuple[Key, bytes, bytes, float]  # a pass-through span: key, envelope, span, due


def _rows(
    entries: Sequence[OutboxEntry], fresh: set[Key]
) -> tuple[list[tuple[Any, ...]], list[Passing]]:
    """Outbox rows of the entries whose span is in ``fresh``, each span once; and the
    pass-through spans with bytes, which share one entry (:func:`_batch`)."""
    seen: set[Key] = set()
    rows: list[tuple[Any, ...]] = []
    passing: list[Passing] = []
    for entry in entries:
        key = (entry.trace_id, entry.span_id)
        if key in seen or key not in fresh:
            continue
        seen.add(key)  # a span twice in one request goes out once
        if not entry.hold and entry.span is not None and entry.envelope is not None:
            passing.append((key, entry.envelope, entry.span, entry.release_at))
            continue
        trace_id, span_id = clean_text(entry.trace_id), clean_text(entry.span_id)
        hold = 1 if entry.hold else 0
        rows.append((trace_id, span_id, hold, entry.release_at, entry.span, entry.envelope, 1))
    return rows, passing


def outbox_rows(
    entries: Sequence[OutboxEntry], fresh: set[Key] | None = None
) -> list[tuple[Any, ...]]:
    """The outbox rows of ``entries`` (only those whose span is in ``fresh``; None: all), in
    key order: held spans one each, pass-through spans with bytes one shared entry. Built
    before the write transaction (compressing is CPU work that needs no lock)."""
    if fresh is None:
        fresh = {(e.trace_id, e.span_id) for e in entries}
    rows, passing = _rows(entries, fresh)
    rows += _batch(passing)
    rows.sort(key=lambda row: (row[0], row[1]))  # one lock order for concurrent writers
    return rows


def _batch(passing: Sequence[Passing]) -> list[tuple[Any, ...]]:
    """The one entry of pass-through spans: their request body, compressed (level 1: 1.4 us
    per span for a third to a tenth of the bytes to write)."""
    if not passing:
        return []
    body = zlib.compress(request_body((p[1], p[2]) for p in passing), 1)
    due = min(p[3] for p in passing)
    return [("", f"batch:{uuid.uuid4().hex}", 0, due, body, None, len(passing))]


class OutboxQueries(SqlCore):
    """:class:`~spanjudge.exporters.store.base.Outbox` over the shared SQL core."""

    # ------------------------------------------------------------------ writing (write_spans)
    def outbox_mark(self, cur: Cursor) -> int | None:
        """Before the spans are inserted (SQLite): the highest span rowid, so the rows this write
        adds can be told afterwards (the write lock keeps other writers out meanwhile). None on
        PostgreSQL, which tells them by row version."""
        if self.inserted_here:
            return None
        cur.execute("SELECT COALESCE(MAX(rowid), 0) FROM spans")
        return int(cur.fetchone()[0])

    def _inserted_keys(self, cur: Cursor, keys: set[Key], mark: int | None) -> set[Key]:
        """Which of ``keys`` this transaction inserted as spans (``mark``: see outbox_mark)."""
        traces = sorted({trace_id for trace_id, _ in keys})
        found: set[Key] = set()
        mine = self.inserted_here or "rowid > ?"
        for i in range(0, len(traces), _CHUNK):
            part = traces[i : i + _CHUNK]
            marks = ", ".join("?" * len(part))
            cur.execute(
                self.q(
                    f"SELECT trace_id, span_id FROM spans WHERE trace_id IN ({marks}) AND {mine}"
                ),
                [*part, mark] if mark is not None else part,
            )
            found.update((row[0], row[1]) for row in cur.fetchall())
        return found & keys

    def write_outbox(
        self,
        cur: Cursor,
        entries: Sequence[OutboxEntry],
        prepared: list[tuple[Any, ...]],
        mark: int | None,
        *,
        all_new: bool,
    ) -> None:
        """After the spans: an entry for each span this write stored for the first time (a
        re-delivered span is forwarded once). ``prepared``: :func:`outbox_rows` made before the
        transaction, right when ``all_new`` (every span was inserted now: the usual case)."""
        if not all_new:
            keys = {(e.trace_id, e.span_id) for e in entries}
            prepared = outbox_rows(entries, self._inserted_keys(cur, keys, mark))
        for i in range(0, len(prepared), _CHUNK):
            # one statement for many rows (a round trip each on PostgreSQL otherwise); once
            # ever per span: held entries are keyed by their span
            part = prepared[i : i + _CHUNK]
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(part))
            cur.execute(
                self.q(
                    "INSERT INTO outbox (trace_id, span_id, hold, release_at, payload, envelope,"
                    f" spans) VALUES {values} ON CONFLICT (trace_id, span_id) DO NOTHING"
                ),
                [value for row in part for value in row],
            )

    def release_held(self, *, now: float) -> int:
        with self.transaction() as cur:
            cur.execute(
                self.q(
                    "UPDATE outbox SET release_at = ? WHERE forwarded_at IS NULL AND hold = 1"
                    " AND release_at > ? AND EXISTS (SELECT 1 FROM traces t"
                    " WHERE t.trace_id = outbox.trace_id AND t.planned_at IS NOT NULL)"
                    " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.trace_id = outbox.trace_id"
                    " AND j.span_id = outbox.span_id AND j.target_type <> 'conversation'"
                    f" AND j.{OPEN_JOBS})"
                ),
                (now, now),
            )
            return max(cur.rowcount, 0)

    def claim_outbox(
        self, *, owner: str, limit: int, lease_seconds: float, now: float
    ) -> OutboxClaim:
        if limit <= 0:
            return OutboxClaim([], [])
        sql = (
            "WITH picked AS (SELECT entry_id FROM outbox WHERE forwarded_at IS NULL"
            " AND release_at <= ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)"
            f" ORDER BY release_at LIMIT ?{self.claim_lock})"
            " UPDATE outbox SET lease_owner = ?, lease_expires_at = ?, attempts = attempts + 1"
            " WHERE entry_id IN (SELECT entry_id FROM picked) RETURNING entry_id, hold,"
            " attempts, trace_id, span_id, payload, envelope, spans, release_at"
        )
        with self.transaction() as cur:
            cur.execute(self.q(sql), (now, now, limit, owner, now + lease_seconds))
            rows = sorted(cur.fetchall(), key=lambda row: (row[8], row[0]))
            if not rows:
                return OutboxClaim([], [])
            claimed = {int(row[0]) for row in rows}
            items = [
                OutboxItem(
                    int(row[0]),
                    None,
                    bool(row[1]),
                    int(row[2]),
                    trace_id=row[3],
                    span_id=row[4],
                    payload=bytes(row[5]) if row[5] is not None else None,
                    envelope=bytes(row[6]) if row[6] is not None else None,
                    spans=int(row[7]),
                )
                for row in rows
            ]
            rebuild = [item for item in items if item.payload is None]
            if rebuild:  # entries written before payloads were kept: read their spans
                marks = ", ".join("?" * len(rebuild))
                cur.execute(
                    self.q(
                        f"SELECT o.entry_id, {SPAN_COLUMNS_S} FROM outbox o"
                        " JOIN spans s ON s.trace_id = o.trace_id AND s.span_id = o.span_id"
                        f" WHERE o.entry_id IN ({marks})"
                    ),
                    [item.entry_id for item in rebuild],
                )
                spans = {int(row[0]): span_from_row(row[1:]) for row in cur.fetchall()}
                for item in rebuild:
                    item.span = spans.get(item.entry_id)
                items = [item for item in items if item.payload is not None or item.span]
            held = {(item.trace_id, item.span_id): item for item in items if item.hold}
            traces = sorted({trace_id for trace_id, _ in held})
            if traces:
                marks = ", ".join("?" * len(traces))
                cur.execute(
                    self.q(
                        "SELECT record FROM results WHERE target_type <> 'conversation'"
                        f" AND trace_id IN ({marks}) ORDER BY created_at, job_id"
                    ),
                    traces,
                )
                for row in cur.fetchall():
                    record = record_from_json(row[0])
                    scored = held.get((record.trace_id or "", record.span_id or ""))
                    if scored is not None:
                        scored.results.append(record)
        for item in items:  # outside the transaction: SQLite's write lock is not held for it
            if item.payload is not None and item.envelope is None:
                item.payload = zlib.decompress(item.payload)
        found = {item.entry_id for item in items}
        return OutboxClaim(items, sorted(claimed - found))

    def mark_forwarded(self, entry_ids: Sequence[int], *, now: float) -> None:
        self.update_each(
            (
                "UPDATE outbox SET forwarded_at = ?, lease_owner = NULL,"
                " lease_expires_at = NULL WHERE entry_id = ?",
                now,
                entry_ids,
            )
        )

    def retry_outbox(self, entry_ids: Sequence[int], *, retry_at: float) -> None:
        self.update_each(
            (
                "UPDATE outbox SET lease_owner = NULL, lease_expires_at = ?"
                " WHERE entry_id = ? AND forwarded_at IS NULL",
                retry_at,
                entry_ids,
            )
        )

    def outbox_waiting(self, trace_id: str, span_id: str, *, now: float) -> bool:
        rows = self.select(
            "SELECT 1 FROM outbox WHERE trace_id = ? AND span_id = ?"
            " AND forwarded_at IS NULL"
            " AND (lease_owner IS NULL OR lease_expires_at <= ?)",
            (trace_id, span_id, now),
        )
        return bool(rows)
