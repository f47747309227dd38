"""Late spans in SQL: what arrives after its trace or conversation was planned is planned again.

A span new to a trace already planned is late: the write that stores it sets the trace
unplanned, so it settles again, and notes in ``late_traces`` when the first late span came;
planning reads the spans that arrived since (:meth:`LateQueries.late_spans`) and, once the trace
is marked planned again, drops the note. A new span that carries the id of a conversation already
planned sets the conversation unplanned, so it goes idle again and is judged again over all its
turns. A span delivered twice (a client's retry) is not new, and our own evaluation spans, which
go into the traces they judge, never count.

Example::

    store.write_spans([child], now=t)            # the trace was planned at t - 60
    store.late_spans([child.trace_id])           # {trace_id: {child.span_id}}
    store.enqueue_planned(jobs, traces=[child.trace_id], replanned=[child.trace_id], now=t + 10)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.columns import clean_text
from spanjudge._store.outbox import OutboxQueries
from spanjudge._store.sql_base import IDS_PER_LIST, Cursor
from spanjudge.tracer import _attributes as attrs


def _marks(ids: Sequence[Any]) -> str:
    return ", ".join("?" * len(ids))


def _chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[start : start + IDS_PER_LIST] for start in range(0, len(ids), IDS_PER_LIST)]


class LateQueries(OutboxQueries):
    """The late-span part of :class:`~spanjudge._store.spans.SpanQueries`: noted by
    ``write_spans``, read and cleared by planning."""

    def reopen_planned(
        self,
        cur: Cursor,
        spans: Sequence[SpanRecord],
        rows: Sequence[tuple[Any, ...]],
        arrived: float,
        mark: int | None,
        *,
        all_new: bool,
    ) -> None:
        """Inside ``write_spans``, after its rows (which hold its traces' and conversations'
        row locks, so a planner marking them waits and then sees the new arrival): a trace
        planned before that got a span new to it settles again, noted as late; a conversation
        planned before that got a new span goes idle again. ``rows``: the spans' rows (cleaned
        ids); ``mark``/``all_new``: which rows this write inserted (see ``outbox_mark``). One
        read when nothing was planned, the usual write."""
        traces = sorted({row[0] for row in rows})
        conversations = sorted({row[14] for row in rows if row[14] is not None})
        planned_traces, planned_conversations = self._planned(cur, traces, conversations)
        if not planned_traces and not planned_conversations:
            return
        candidates: dict[tuple[str, str], str | None] = {
            (row[0], row[1]): row[14]
            for span, row in zip(spans, rows, strict=True)
            if attrs.GEN_AI_EVALUATION_NAME not in span.attributes
            and (row[0] in planned_traces or row[14] in planned_conversations)
        }
        fresh = set(candidates) if all_new else self._inserted_keys(cur, set(candidates), mark)
        late = sorted({trace_id for trace_id, _ in fresh} & planned_traces)
        if late:
            cur.executemany(
                self.q(
                    "INSERT INTO late_traces (trace_id, since) VALUES (?, ?)"
                    " ON CONFLICT (trace_id) DO NOTHING"
                ),
                [(trace_id, arrived) for trace_id in late],
            )
            self._unplan(cur, "traces", "trace_id", late)
        idle = {c for c in map(candidates.__getitem__, fresh) if c in planned_conversations}
        if idle:
            self._unplan(cur, "conversations", "conversation_id", sorted(idle))

    def _planned(
        self, cur: Cursor, traces: Sequence[str], conversations: Sequence[str]
    ) -> tuple[set[str], set[str]]:
        """Which of ``traces`` and of ``conversations`` are marked planned: one statement per
        500 ids of each."""
        found: tuple[set[str], set[str]] = (set(), set())
        trace_chunks, conversation_chunks = _chunks(traces), _chunks(conversations)
        for i in range(max(len(trace_chunks), len(conversation_chunks))):
            parts: list[str] = []
            params: list[str] = []
            for kind, (table, key, chunks) in enumerate(
                (
                    ("traces", "trace_id", trace_chunks),
                    ("conversations", "conversation_id", conversation_chunks),
                )
            ):
                if i < len(chunks):
                    parts.append(
                        f"SELECT {kind}, {key} FROM {table} WHERE {key} IN ({_marks(chunks[i])})"
                        " AND planned_at IS NOT NULL"
                    )
                    params.extend(chunks[i])
            cur.execute(self.q(" UNION ALL ".join(parts)), params)
            for kind, key in cur.fetchall():
                found[int(kind)].add(key)
        return found

    def _unplan(self, cur: Cursor, table: str, key: str, ids: Sequence[str]) -> None:
        for chunk in _chunks(ids):
            cur.execute(
                self.q(f"UPDATE {table} SET planned_at = NULL WHERE {key} IN ({_marks(chunk)})"),
                chunk,
            )

    def clear_late(self, cur: Cursor, trace_ids: Sequence[str]) -> None:
        """Inside the planning transaction, after the marks: drop the late notes of these
        traces where the trace was marked planned (one left unplanned keeps its note)."""
        wanted = sorted({clean_text(t) or "" for t in trace_ids})
        for chunk in _chunks(wanted):
            cur.execute(
                self.q(
                    "DELETE FROM late_traces WHERE trace_id IN (SELECT trace_id FROM traces"
                    f" WHERE trace_id IN ({_marks(chunk)}) AND planned_at IS NOT NULL)"
                ),
                chunk,
            )

    def note_late(self, cur: Cursor, trace_ids: Sequence[str], *, since: float) -> None:
        """Inside the planning transaction: the spans of these traces (planned while still
        busy, not marked) that arrive from ``since`` on are late, whatever the note said."""
        wanted = sorted({clean_text(t) or "" for t in trace_ids})
        cur.executemany(
            self.q(
                "INSERT INTO late_traces (trace_id, since) VALUES (?, ?)"
                " ON CONFLICT (trace_id) DO UPDATE SET since = excluded.since"
            ),
            [(trace_id, since) for trace_id in wanted],
        )

    def late_spans(self, trace_ids: Sequence[str]) -> dict[str, set[str]]:
        """For those of these traces that got spans after they were planned: the ids of every
        span that arrived since the first late one (evaluation spans included: a reader
        leaves them out). Forgotten once the trace is planned again
        (``enqueue_planned(replanned=...)``)."""
        found: dict[str, set[str]] = {}
        with self.transaction(write=False) as cur:
            for chunk in _chunks(sorted(set(trace_ids))):
                # every span that arrived since the first late one: a span that comes while the
                # trace waits to settle again is late too (the trace is not marked planned then)
                cur.execute(
                    self.q(
                        "SELECT s.trace_id, s.span_id FROM late_traces l JOIN spans s"
                        " ON s.trace_id = l.trace_id AND s.arrived_at >= l.since"
                        f" WHERE l.trace_id IN ({_marks(chunk)})"
                    ),
                    chunk,
                )
                for trace_id, span_id in cur.fetchall():
                    found.setdefault(trace_id, set()).add(span_id)
        return found
