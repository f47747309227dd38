"""The enrich-mode outbox in SQL: entries written with their spans, released, leased, forwarded.

Example::

    store.release_held(now=t)
    claim = store.claim_outbox(owner=token, limit=512, lease_seconds=30, now=t)
    store.mark_forwarded([item.entry_id for item in claim.items], now=t)
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spanjudge._core.otlp_wire import (
    WireSpan,
    indexed_request_body,
    request_body,
    split_request,
)
from spanjudge._store.columns import (
    SPAN_COLUMNS_S,
    array_literal,
    clean_text,
    record_from_json,
    span_from_row,
)
from spanjudge._store.models import OutboxClaim, OutboxEntry, OutboxItem
from spanjudge._store.packing import pack, unpack
from spanjudge._store.schema import OPEN_JOBS
from spanjudge._store.sql_base import IDS_PER_LIST, Cursor, SqlCore

Key = tuple[str, str]


Passing = tuple[Key, bytes, bytes, float]  # a span with its bytes: key, envelope, span, due


@dataclass
class PreparedOutbox:
    """A write's outbox rows, built before its transaction (:func:`outbox_rows`).

    ``shared``: the one entry of the spans that came with their bytes (None without such
    spans): their bytes, compressed, pass-through spans first as the request body to send
    (``split`` bytes long), then the held spans' request (one resource and scope per group, as
    in any request). ``pointers``: a row per held span of it, ``(trace_id, span_id, release_at,
    piece)``, ``piece`` being where :func:`split_request` lists the span in the held part; the
    shared entry's id is only known once it is inserted. ``rows``: full rows of spans without
    bytes (rebuilt from the stored span when claimed). ``arrived``: the write's arrival time,
    the spans' ``arrived_at`` (how a held row is found from its span)."""

    arrived: float
    shared: tuple[Any, ...] | None = None
    pointers: list[tuple[str | None, str | None, float, int]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def outbox_rows(
    entries: Sequence[OutboxEntry], *, arrived: float, fresh: set[Key] | None = None
) -> PreparedOutbox:
    """The outbox rows of ``entries`` arrived at ``arrived`` (only those whose span is in
    ``fresh``; None: all), each span once, in key order. Built before the write transaction
    (compressing is CPU work that needs no lock)."""
    seen: set[Key] = set()
    out = PreparedOutbox(arrived)
    passing: list[Passing] = []
    held: list[Passing] = []
    for entry in entries:
        key = (entry.trace_id, entry.span_id)
        if key in seen or (fresh is not None and key not in fresh):
            continue
        seen.add(key)  # a span twice in one request goes out once
        if entry.span is not None and entry.envelope is not None:
            (held if entry.hold else passing).append(
                (key, entry.envelope, entry.span, entry.release_at)
            )
            continue
        trace_id, span_id = clean_text(entry.trace_id), clean_text(entry.span_id)
        hold = 1 if entry.hold else 0
        out.rows.append((trace_id, span_id, hold, entry.release_at, None, None, 1))
    out.rows.sort(key=lambda row: (row[0], row[1]))
    if passing or held:
        out.shared, out.pointers = _shared(passing, held, arrived)
    return out


def _shared(
    passing: Sequence[Passing], held: Sequence[Passing], arrived: float
) -> tuple[tuple[Any, ...], list[tuple[str | None, str | None, float, int]]]:
    """The shared entry's row (compressed, :mod:`~spanjudge._store.packing`) and its
    held spans' pointer rows."""
    body = request_body((p[1], p[2]) for p in passing)
    held_body, places = indexed_request_body([(p[1], p[2]) for p in held])
    payload = pack(body + held_body)
    # with nothing to send, the entry only keeps the held spans' bytes: sent already
    due = min(p[3] for p in passing) if passing else arrived
    done = None if passing else arrived
    shared = ("", f"batch:{uuid.uuid4().hex}", 0, due, payload, len(passing), len(body), done)
    pointers = [
        (clean_text(p[0][0]), clean_text(p[0][1]), p[3], place)
        for p, place in zip(held, places, strict=True)
    ]
    pointers.sort(key=lambda row: (row[0], row[1]))
    return shared, pointers


def _unpack(
    items: Sequence[OutboxItem],
    places: dict[int, tuple[int, int]],
    splits: dict[int, int],
    shared: dict[int, tuple[bytes, int]],
) -> None:
    """Decompress claimed bodies (outside the claim's transaction): a shared entry's request
    (its first ``split`` bytes), and each held span's bytes and envelope out of the shared
    entry it points into (``places``: entry id -> (shared entry id, piece))."""
    opened: dict[int, list[WireSpan]] = {}
    for item in items:
        place = places.get(item.entry_id)
        if place is not None:
            shared_id, piece = place
            if shared_id not in opened:
                payload, start = shared[shared_id]
                opened[shared_id] = split_request(unpack(payload)[start:])
            wire = opened[shared_id][piece]
            item.payload, item.envelope = wire.span, wire.envelope
        elif item.payload is not None and item.envelope is None:
            body = unpack(item.payload)
            end = splits.get(item.entry_id)
            item.payload = body if end is None else body[:end]


class OutboxQueries(SqlCore):
    """:class:`~spanjudge._store.base.Outbox` over the shared SQL core."""

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
        for i in range(0, len(traces), IDS_PER_LIST):
            part = traces[i : i + IDS_PER_LIST]
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
        prepared: PreparedOutbox,
        mark: int | None,
        *,
        all_new: bool,
    ) -> None:
        """After the spans: an entry for each span this write stored for the first time (a
        re-delivered span is forwarded once: the spans insert tells which are new, so the
        outbox needs no unique key of its own). ``prepared``: :func:`outbox_rows` made before
        the transaction, right when ``all_new`` (every span was inserted now: the usual case)."""
        if not all_new:
            keys = {(e.trace_id, e.span_id) for e in entries}
            fresh = self._inserted_keys(cur, keys, mark)
            prepared = outbox_rows(entries, arrived=prepared.arrived, fresh=fresh)
        arrived = prepared.arrived
        rows = [(*row, arrived) for row in prepared.rows]
        for i in range(0, len(rows), IDS_PER_LIST):  # spans that came without bytes (rare)
            # one statement for many rows (a round trip each on PostgreSQL otherwise)
            part = rows[i : i + IDS_PER_LIST]
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(part))
            cur.execute(
                self.q(
                    "INSERT INTO outbox (trace_id, span_id, hold, release_at, payload, envelope,"
                    f" spans, arrived_at) VALUES {values}"
                ),
                [value for row in part for value in row],
            )
        if prepared.shared is not None:
            self._write_shared(cur, (*prepared.shared, arrived), prepared.pointers, arrived)

    def _write_shared(
        self,
        cur: Cursor,
        shared: tuple[Any, ...],
        pointers: Sequence[tuple[str | None, str | None, float, int]],
        arrived: float,
    ) -> None:
        """The shared entry and the rows of its held spans, which point into it by its id."""
        head = (
            "INSERT INTO outbox (trace_id, span_id, hold, release_at, payload, spans, split,"
            " forwarded_at, arrived_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        if not pointers:
            cur.execute(self.q(head), shared)
            return

        def held(rows: Sequence[tuple[Any, ...]], shared_id: str) -> str:
            values = ", ".join(["(?, ?, ?, ?)"] * len(rows))
            return (
                "INSERT INTO outbox (trace_id, span_id, hold, release_at, spans, shared_id,"
                f" piece, arrived_at) SELECT v.column1, v.column2, 1, v.column3, 1, {shared_id},"
                f" v.column4, ? FROM (VALUES {values}) AS v"
            )

        if self.placeholder != "?":
            # a server (PostgreSQL): one statement, one round trip, the entry's id passed on
            # inside it. The held rows go as four arrays: a fixed statement of 14 parameters
            # that the driver parses once, where a VALUES row per held span (90 parameters for
            # 20) was parsed again on every write, 1.1 ms each time. Each array is one literal
            # the server parses (array_literal: a fifth of the driver's CPU for them)
            columns = [array_literal(column) for column in zip(*pointers, strict=True)]
            cur.execute(
                self.q(
                    f"WITH shared AS ({head} RETURNING entry_id)"
                    " INSERT INTO outbox (trace_id, span_id, hold, release_at, spans, shared_id,"
                    " piece, arrived_at) SELECT v.trace_id, v.span_id, 1, v.release_at, 1,"
                    " (SELECT entry_id FROM shared), v.piece, ? FROM unnest(?::text[],"
                    " ?::text[], ?::double precision[], ?::integer[])"
                    " WITH ORDINALITY AS v(trace_id, span_id, release_at, piece, n) ORDER BY v.n"
                ),
                [*shared, arrived, *columns],
            )
            return
        cur.execute(self.q(f"{head} RETURNING entry_id"), shared)
        shared_id = int(cur.fetchone()[0])
        for i in range(0, len(pointers), IDS_PER_LIST):
            part = pointers[i : i + IDS_PER_LIST]
            cur.execute(
                self.q(held(part, "?")),
                [shared_id, arrived, *(value for row in part for value in row)],
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
            " attempts, trace_id, span_id, payload, envelope, spans, release_at, shared_id,"
            " piece, split"
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
            # held spans whose bytes are in a shared entry: (its id, where in it); split: the
            # length of a shared entry's request to send (None: all of it, version 7)
            places = {int(r[0]): (int(r[9]), int(r[10])) for r in rows if r[9] is not None}
            splits = {int(r[0]): int(r[11]) for r in rows if r[11] is not None}
            shared = self._shared_payloads(cur, {shared for shared, _ in places.values()})
            rebuild = [i for i in items if i.payload is None and i.entry_id not in places]
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
            items = [
                item
                for item in items
                if item.payload is not None
                or item.span is not None
                or places.get(item.entry_id, (-1, 0))[0] in shared
            ]
            self._attach_results(cur, items)
        _unpack(items, places, splits, shared)  # outside: SQLite's write lock is not held for it
        found = {item.entry_id for item in items}
        return OutboxClaim(items, sorted(claimed - found))

    def _shared_payloads(self, cur: Cursor, ids: set[int]) -> dict[int, tuple[bytes, int]]:
        """The compressed payload and split of each shared entry in ``ids`` still stored."""
        out: dict[int, tuple[bytes, int]] = {}
        wanted = sorted(ids)
        for i in range(0, len(wanted), IDS_PER_LIST):
            part = wanted[i : i + IDS_PER_LIST]
            marks = ", ".join("?" * len(part))
            cur.execute(
                self.q(f"SELECT entry_id, payload, split FROM outbox WHERE entry_id IN ({marks})"),
                part,
            )
            out.update((int(r[0]), (bytes(r[1]), int(r[2] or 0))) for r in cur.fetchall())
        return out

    def _attach_results(self, cur: Cursor, items: Sequence[OutboxItem]) -> None:
        """Each held item's span-level results, oldest first."""
        held = {(item.trace_id, item.span_id): item for item in items if item.hold}
        traces = sorted({trace_id for trace_id, _ in held})
        if not traces:
            return
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
        # found from its span: the held rows of the span's write (indexed by arrival, which
        # grows as rows are added: an index by span id would take a random page per held row)
        rows = self.select(
            "SELECT 1 FROM spans s JOIN outbox o ON o.arrived_at = s.arrived_at AND o.hold = 1"
            " AND o.trace_id = s.trace_id AND o.span_id = s.span_id"
            " WHERE s.trace_id = ? AND s.span_id = ? AND o.forwarded_at IS NULL"
            " AND (o.lease_owner IS NULL OR o.lease_expires_at <= ?)",
            (trace_id, span_id, now),
        )
        return bool(rows)
