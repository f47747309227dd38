"""Backlog figures in SQL for the metrics endpoint: indexed counts only, cheap at any size.

Example::

    print(store.stats(now=time.time()).pending)
"""

from __future__ import annotations

from spanjudge._store.models import DONE, FAILED, LEASED, PENDING, StoreStats
from spanjudge._store.schema import OPEN_JOBS
from spanjudge._store.sql_base import SqlCore


class StatsQueries(SqlCore):
    """The store's backlog figures (``stats()``)."""

    def stats(self, *, now: float) -> StoreStats:
        """Backlog counts (cheap: indexed)."""
        out = StoreStats()
        with self.transaction(write=False) as cur:
            counts: dict[str, int] = {}
            for state in (PENDING, LEASED, DONE, FAILED):
                cur.execute(self.q("SELECT COUNT(*) FROM jobs WHERE state = ?"), (state,))
                counts[state] = int(cur.fetchone()[0])
            out.pending, out.leased = counts[PENDING], counts[LEASED]
            out.done, out.failed = counts[DONE], counts[FAILED]
            cur.execute(f"SELECT MIN(created_at) FROM jobs WHERE {OPEN_JOBS}")
            oldest = cur.fetchone()[0]
            out.oldest_pending_age_seconds = max(0.0, now - oldest) if oldest is not None else 0.0
            cur.execute("SELECT COUNT(*) FROM traces WHERE planned_at IS NULL")
            out.unplanned_traces = int(cur.fetchone()[0])
            cur.execute("SELECT COUNT(*) FROM conversations WHERE planned_at IS NULL")
            out.unplanned_conversations = int(cur.fetchone()[0])
            cur.execute(
                self.q(
                    "SELECT COALESCE(SUM(CASE WHEN release_at > ? THEN spans ELSE 0 END), 0),"
                    " COALESCE(SUM(CASE WHEN release_at <= ? THEN spans ELSE 0 END), 0)"
                    " FROM outbox WHERE forwarded_at IS NULL"
                ),
                (now, now),
            )
            held, due = cur.fetchone()
            out.outbox_held, out.outbox_due = int(held), int(due)
        return out
