"""The event log in SQL: GenAI content log events in, by trace out, counted as trace activity.

A content event may reach the store before or after its span (two OTLP signals, two exporters,
two batches). Each write therefore touches the trace as a span write does: the ``traces`` row is
created if the event came first, and its ``last_arrival`` moves forward, so the trace settles
only after its last span *or* event arrived. The conversations the trace's spans belong to move
forward too, so an idle conversation is not planned before its last turn's content is in.

Example::

    store.write_logs(events, now=t)
    events = store.trace_logs([trace_id])
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from spanjudge._core.span_record import LogEvent
from spanjudge._store.columns import clean_text
from spanjudge._store.sql_base import IDS_PER_LIST, SqlCore, wall

LOG_COLUMNS = (
    "trace_id, span_id, event_name, time_ns, attributes, body, resource, scope_name,"
    " arrived_at, event_key"
)
_LOG_TYPES = ("text", "text", "text", "bigint", "text", "text", "text", "text", "real", "text")

# As the span columns: ASCII escapes keep NUL and lone surrogates storable in JSON text.
_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode


def log_row(event: LogEvent, arrived_at: float) -> tuple[Any, ...]:
    """An event as a ``log_events`` row (``LOG_COLUMNS`` order)."""
    attributes = _dumps(event.attributes) if event.attributes else "{}"
    body = _dumps(event.body)
    resource = _dumps(event.resource) if event.resource else "{}"
    span_id = clean_text(event.span_id or None)
    name = clean_text(event.event_name)
    scope = clean_text(event.scope_name)
    # OTLP log records have no id: the whole event is its identity, so a client retrying a
    # batch that was stored (its answer lost) adds nothing.
    identity = _dumps([span_id, name, event.time_unix_nano, attributes, body, resource, scope])
    key = hashlib.sha256(identity.encode("ascii")).hexdigest()[:32]
    trace_id = clean_text(event.trace_id)
    return (trace_id, span_id, name, event.time_unix_nano, attributes, body, resource, scope,
            arrived_at, key)  # fmt: skip


def log_from_row(row: Sequence[Any]) -> LogEvent:
    """A ``log_events`` row (``LOG_COLUMNS`` order, without arrival and key) as an event."""
    return LogEvent(
        trace_id=row[0],
        span_id=row[1],
        event_name=row[2],
        time_unix_nano=int(row[3]),
        attributes=json.loads(row[4]),
        body=json.loads(row[5]),
        resource=json.loads(row[6]),
        scope_name=row[7],
    )


class LogQueries(SqlCore):
    """GenAI content log events over the shared SQL core."""

    def write_logs(self, events: Sequence[LogEvent], *, now: float | None = None) -> None:
        """Store events; ``now`` is their arrival time (default: the wall clock). An event
        already stored (same trace, span, name, time and content) is not stored twice."""
        if not events:
            return
        arrived = wall() if now is None else now
        # Sorted by trace, then time, then batch order: a retried batch locks its keys in the
        # same order as the original (no deadlock), and events with one timestamp keep the order
        # they were emitted in (their event_id, the read tie-breaker).
        rows = [
            row
            for _, row in sorted(
                enumerate(log_row(event, arrived) for event in events),
                key=lambda item: (item[1][0], item[1][3], item[0]),
            )
        ]
        traces = sorted({row[0] for row in rows})
        g = self.greatest
        with self.transaction() as cur:
            self.insert_rows(
                cur,
                f"INSERT INTO log_events ({LOG_COLUMNS})",
                _LOG_TYPES,
                rows,
                " ON CONFLICT (trace_id, event_key) DO NOTHING",
            )
            # Same lock order as write_spans: traces rows, then conversations rows.
            self.insert_rows(
                cur,
                "INSERT INTO traces (trace_id, first_arrival, last_arrival, root_ended)",
                ("text", "real", "real", "int"),
                [(t, arrived, arrived, 0) for t in traces],
                " ON CONFLICT (trace_id) DO UPDATE SET"
                f" last_arrival = {g}(traces.last_arrival, excluded.last_arrival)",
            )
            conversations: set[str] = set()
            for start in range(0, len(traces), IDS_PER_LIST):
                chunk = traces[start : start + IDS_PER_LIST]
                cur.execute(
                    self.q(
                        "SELECT DISTINCT conversation_id FROM spans WHERE trace_id IN"
                        f" ({', '.join('?' * len(chunk))}) AND conversation_id IS NOT NULL"
                    ),
                    chunk,
                )
                conversations.update(row[0] for row in cur.fetchall())
            if conversations:
                cur.executemany(
                    self.q(
                        f"UPDATE conversations SET last_arrival = {g}(last_arrival, ?)"
                        " WHERE conversation_id = ?"
                    ),
                    [(arrived, c) for c in sorted(conversations)],
                )

    def trace_logs(self, trace_ids: Sequence[str]) -> list[LogEvent]:
        """Every stored event of these traces, by time (then arrival order)."""
        wanted = sorted(set(trace_ids))
        found: list[tuple[int, int, LogEvent]] = []
        with self.transaction(write=False) as cur:
            for start in range(0, len(wanted), IDS_PER_LIST):
                chunk = wanted[start : start + IDS_PER_LIST]
                cur.execute(
                    self.q(
                        "SELECT trace_id, span_id, event_name, time_ns, attributes, body,"
                        " resource, scope_name, event_id FROM log_events WHERE trace_id IN"
                        f" ({', '.join('?' * len(chunk))})"
                    ),
                    chunk,
                )
                found.extend((int(r[3]), int(r[8]), log_from_row(r)) for r in cur.fetchall())
        found.sort(key=lambda item: (item[0], item[1]))  # by time, then arrival order
        return [event for _, _, event in found]

    def _delete_logs_older_than(self, cutoff: float) -> int:
        """Retention of log events (the store's ``delete_older_than`` calls it)."""
        with self.transaction() as cur:
            cur.execute(self.q("DELETE FROM log_events WHERE arrived_at < ?"), (cutoff,))
            return max(cur.rowcount, 0)
