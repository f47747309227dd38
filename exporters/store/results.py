"""Stored results in SQL: filtered queries, judge cost for budgets, and the emit-once log.

Example::

    for job_id, record in store.unemitted_results(limit=100):
        ...
    store.mark_emitted([job_id], now=t)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanjudge.exporters.records import EvaluationRecord
from spanjudge.exporters.store.core import SqlCore
from spanjudge.exporters.store.rows import record_from_json


class ResultQueries(SqlCore):
    """:class:`~spanjudge.exporters.store.base.ResultStore` over the shared SQL core."""

    def unemitted_results(self, *, limit: int = 100) -> list[tuple[int, EvaluationRecord]]:
        rows = self.select(
            "SELECT job_id, record FROM results WHERE emitted_at IS NULL ORDER BY job_id LIMIT ?",
            (limit,),
        )
        return [(int(row[0]), record_from_json(row[1])) for row in rows]

    def mark_emitted(self, job_ids: Sequence[int], *, now: float) -> None:
        self.update_each(
            (
                "UPDATE results SET emitted_at = ? WHERE job_id = ? AND emitted_at IS NULL",
                now,
                job_ids,
            )
        )

    def results(
        self,
        *,
        rule: str | None = None,
        metric: str | None = None,
        trace_id: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[EvaluationRecord]:
        # Fixed fragments chosen by which filters are set; the values are parameters.
        where: list[str] = []
        params: list[Any] = []
        for fragment, value in (
            ("rule = ?", rule),
            ("metric = ?", metric),
            ("trace_id = ?", trace_id),
            ("created_at >= ?", since),
        ):
            if value is not None:
                where.append(fragment)
                params.append(value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self.select(
            f"SELECT record FROM results{clause} ORDER BY created_at, job_id LIMIT ?",
            (*params, limit),
        )
        return [record_from_json(row[0]) for row in rows]

    def results_cost_since(self, *, rule: str, since: float) -> float:
        rows = self.select(
            "SELECT SUM(cost) FROM results WHERE rule = ? AND created_at >= ?", (rule, since)
        )
        return float(rows[0][0] or 0.0)
