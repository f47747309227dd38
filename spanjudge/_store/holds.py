"""Spans held for their conversation: written before the receiver answers, decided later.

A worker whose rules sample by conversation cannot decide a child span until some span of its
trace names the conversation (often the root, which ends last). Those spans are kept in the
``held_spans`` table, in the same transaction as the rest of the request, so an acknowledged
span survives SIGTERM, SIGKILL and a restart. When the trace is decided its held rows move into
``spans`` (sampled) or go (not sampled); a span of a trace already stored is stored at once:
what the store holds decides, not a memory that forgets. Held rows are bounded by the worker
(count and bytes, :mod:`spanjudge.worker.keep_policy`) and by retention.

Example::

    admitted = store.admit_spans(kept, hold=waiting, release=["4bf9..."], now=time.time())
    print(admitted.stored_by_store, admitted.released)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.columns import SPAN_COLUMNS, SPAN_TYPES, span_from_row, span_row
from spanjudge._store.spans import SpanQueries
from spanjudge._store.sql_base import IDS_PER_LIST, Cursor, wall

_HELD_COLUMNS = f"{SPAN_COLUMNS}, service_name, conversation_id, arrived_at, size"


def held_size(row: Sequence[object]) -> int:
    """The bytes a held row keeps: its text columns (``span_row`` order)."""
    return sum(len(value) for value in row if isinstance(value, str))


@dataclass
class Admitted:
    """What :meth:`HoldQueries.admit_spans` did."""

    #: traces whose spans asked to be held were stored instead: the trace is already stored
    stored_by_store: set[str] = field(default_factory=set)
    #: held spans moved into ``spans``
    released: int = 0
    #: spans newly held (a span held already is held once)
    held: int = 0
    #: bytes of the newly held rows, by trace
    held_bytes: dict[str, int] = field(default_factory=dict)


def _chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i : i + IDS_PER_LIST] for i in range(0, len(ids), IDS_PER_LIST)]


class HoldQueries(SpanQueries):
    """The ``held_spans`` table over the span log."""

    def admit_spans(
        self,
        spans: Sequence[SpanRecord],
        *,
        hold: Sequence[SpanRecord] = (),
        release: Sequence[str] = (),
        discard: Sequence[str] = (),
        now: float | None = None,
    ) -> Admitted:
        """One transaction: store ``spans``; hold ``hold`` (the spans of a trace already
        stored are stored instead); move the held spans of the ``release`` traces into the
        spans; forget those of the ``discard`` traces. ``now`` is the arrival time."""
        arrived = wall() if now is None else now
        out = Admitted()
        if not (spans or hold or release or discard):
            return out
        self.before_write([*spans, *hold], arrived)
        with self.transaction() as cur:
            stored = list(spans)
            if hold:
                known = self._stored_traces(cur, sorted({s.trace_id for s in hold}))
                out.stored_by_store = known
                stored.extend(s for s in hold if s.trace_id in known)
                out.held, out.held_bytes = self._hold(
                    cur, [s for s in hold if s.trace_id not in known], arrived
                )
            if release:
                moved = self._take_held(cur, sorted(set(release)))
                out.released = len(moved)
                stored.extend(moved)
            if discard:
                self._drop_held(cur, sorted(set(discard)))
            self.write_spans_in(cur, stored, arrived)
        return out

    def discard_held(self, trace_ids: Sequence[str]) -> None:
        """Forget the held spans of these traces (pushed out of a full hold)."""
        if trace_ids:
            with self.transaction() as cur:
                self._drop_held(cur, sorted(set(trace_ids)))

    def held_traces(self) -> list[tuple[str, float, int, int]]:
        """Every trace with held spans: ``(trace_id, first held at, spans, bytes)``, oldest
        first (a worker starting again rebuilds its view of the hold from it)."""
        return [
            (row[0], float(row[1]), int(row[2]), int(row[3]))
            for row in self.select(
                "SELECT trace_id, MIN(arrived_at), COUNT(*), SUM(size) FROM held_spans"
                " GROUP BY trace_id ORDER BY MIN(arrived_at), trace_id",
                (),
            )
        ]

    def _stored_traces(self, cur: Cursor, trace_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(trace_ids):
            marks = ", ".join("?" * len(chunk))
            cur.execute(self.q(f"SELECT trace_id FROM traces WHERE trace_id IN ({marks})"), chunk)
            found.update(row[0] for row in cur.fetchall())
        return found

    def _hold(
        self, cur: Cursor, spans: Sequence[SpanRecord], arrived: float
    ) -> tuple[int, dict[str, int]]:
        if not spans:
            return 0, {}
        rows = []
        sizes: dict[str, int] = {}
        for span in sorted(spans, key=lambda s: (s.trace_id, s.span_id)):
            row = span_row(span, arrived)
            size = held_size(row)
            rows.append((*row, size))
            sizes[span.trace_id] = sizes.get(span.trace_id, 0) + size
        self.insert_rows(
            cur,
            f"INSERT INTO held_spans ({_HELD_COLUMNS})",
            (*SPAN_TYPES, "bigint"),
            rows,
            " ON CONFLICT (trace_id, span_id) DO NOTHING",
        )
        return max(cur.rowcount, 0), sizes  # (rows inserted: a span held already is not)

    def _take_held(self, cur: Cursor, trace_ids: Sequence[str]) -> list[SpanRecord]:
        spans: list[SpanRecord] = []
        for chunk in _chunks(trace_ids):
            marks = ", ".join("?" * len(chunk))
            cur.execute(
                self.q(
                    f"SELECT {SPAN_COLUMNS} FROM held_spans WHERE trace_id IN ({marks})"
                    " ORDER BY trace_id, span_id"
                ),
                chunk,
            )
            spans.extend(span_from_row(row) for row in cur.fetchall())
        self._drop_held(cur, trace_ids)
        return spans

    def _drop_held(self, cur: Cursor, trace_ids: Sequence[str]) -> None:
        for chunk in _chunks(trace_ids):
            marks = ", ".join("?" * len(chunk))
            cur.execute(self.q(f"DELETE FROM held_spans WHERE trace_id IN ({marks})"), chunk)

    def delete_older_than(self, cutoff: float) -> int:
        deleted = super().delete_older_than(cutoff)
        with self.transaction() as cur:  # a hold no conversation ever decided
            cur.execute(self.q("DELETE FROM held_spans WHERE arrived_at < ?"), (cutoff,))
        return deleted
