"""The enrich-mode outbox in SQL: entries written with their spans, released, leased, forwarded.

Example::

    store.release_held(now=t)
    claim = store.claim_outbox(owner=token, limit=512, lease_seconds=30, now=t)
    store.mark_forwarded([item.entry_id for item in claim.items], now=t)
"""

from __future__ import annotations

from collections.abc import Sequence

from spanjudge.exporters.store.base import OutboxClaim, OutboxItem
from spanjudge.exporters.store.core import SqlCore
from spanjudge.exporters.store.rows import SPAN_COLUMNS_S, record_from_json, span_from_row
from spanjudge.exporters.store.schema import OPEN_JOBS


class OutboxQueries(SqlCore):
    """:class:`~spanjudge.exporters.store.base.Outbox` over the shared SQL core."""

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
            " WHERE entry_id IN (SELECT entry_id FROM picked) RETURNING entry_id"
        )
        with self.transaction() as cur:
            cur.execute(self.q(sql), (now, now, limit, owner, now + lease_seconds))
            claimed = {int(row[0]) for row in cur.fetchall()}
            if not claimed:
                return OutboxClaim([], [])
            ids = sorted(claimed)
            marks = ", ".join("?" * len(ids))
            cur.execute(
                self.q(
                    f"SELECT o.entry_id, o.hold, o.attempts, {SPAN_COLUMNS_S} FROM outbox o"
                    " JOIN spans s ON s.trace_id = o.trace_id AND s.span_id = o.span_id"
                    f" WHERE o.entry_id IN ({marks}) ORDER BY o.release_at, o.entry_id"
                ),
                ids,
            )
            items = [
                OutboxItem(int(row[0]), span_from_row(row[3:]), bool(row[1]), int(row[2]))
                for row in cur.fetchall()
            ]
            held = {(item.span.trace_id, item.span.span_id): item for item in items if item.hold}
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
                    item = held.get((record.trace_id or "", record.span_id or ""))
                    if item is not None:
                        item.results.append(record)
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
