"""Stored results in SQL: filtered queries, judge cost for budgets, the emit-once log, and the
results a later evaluation of the same target superseded.

Example::

    for item in store.unemitted_results(outputs=["span", "event"], limit=100):
        emitter.emit(item.record, item.job_id, outputs=item.outputs)
    store.mark_emitted([job_id], now=t, output="span")
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store.columns import record_from_json
from spanjudge._store.models import EMIT_COLUMNS, Superseded, Unemitted
from spanjudge._store.sql_base import SqlCore
from spanjudge.errors import ConfigError


class ResultQueries(SqlCore):
    """Evaluation results over the shared SQL core: queries, budgets, the emit-once log."""

    def unemitted_results(
        self, *, outputs: Collection[str] | None = None, limit: int = 100
    ) -> list[Unemitted]:
        """Stored results that still owe one of ``outputs`` (default: every output), oldest
        first, each with the outputs it still owes."""
        wanted = [o for o in EMIT_COLUMNS if outputs is None or o in outputs]
        if not wanted:
            return []
        # Fixed fragments picked from EMIT_COLUMNS (never user text); one partial index each.
        owed = " OR ".join(f"{EMIT_COLUMNS[o]} IS NULL" for o in wanted)
        flags = ", ".join(f"{EMIT_COLUMNS[o]} IS NULL" for o in wanted)
        rows = self.select(
            f"SELECT job_id, record, {flags} FROM results WHERE {owed} ORDER BY job_id LIMIT ?",
            (limit,),
        )
        return [
            Unemitted(
                int(row[0]),
                record_from_json(row[1]),
                tuple(o for o, flag in zip(wanted, row[2:], strict=True) if flag),
            )
            for row in rows
        ]

    def mark_emitted(self, job_ids: Sequence[int], *, now: float, output: str = "span") -> None:
        """Record that these jobs' results went out through ``output`` (``span``/``event``)."""
        column = EMIT_COLUMNS.get(output)
        if column is None:
            raise ConfigError(f"unknown output {output!r}; known: {', '.join(EMIT_COLUMNS)}")
        self.update_each(
            (
                f"UPDATE results SET {column} = ? WHERE job_id = ? AND {column} IS NULL",
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
        """Stored results matching every given filter (``since``: completion time), oldest
        first."""
        clause, params = self.where(
            ("rule = ?", rule),
            ("metric = ?", metric),
            ("trace_id = ?", trace_id),
            ("created_at >= ?", since),
        )
        rows = self.select(
            f"SELECT record FROM results{clause} ORDER BY created_at, job_id LIMIT ?",
            (*params, limit),
        )
        return [record_from_json(row[0]) for row in rows]

    def results_cost_since(self, *, rule: str, since: float) -> float:
        # a superseded result was paid for too
        """Judge cost (USD) of a rule's results completed since ``since``, superseded ones
        included (daily budgets)."""
        rows = self.select(
            "SELECT SUM(cost) FROM results WHERE rule = ? AND created_at >= ?"
            " UNION ALL SELECT SUM(cost) FROM superseded_results WHERE rule = ?"
            " AND created_at >= ?",
            (rule, since, rule, since),
        )
        return float(sum(row[0] or 0.0 for row in rows))

    def errored_job_ids(self, *, since: float, until: float) -> list[int]:
        """Jobs whose current result is an error recorded in ``[since, until]``, by id
        (``backfill --retry-errors`` redoes them)."""
        rows = self.select(
            "SELECT job_id FROM results WHERE status = 'error' AND created_at >= ?"
            " AND created_at <= ? ORDER BY job_id",
            (since, until),
        )
        return [int(row[0]) for row in rows]

    def superseded_results(
        self,
        *,
        rule: str | None = None,
        target_id: str | None = None,
        trace_id: str | None = None,
        job_id: int | None = None,
        limit: int = 1000,
    ) -> list[Superseded]:
        """Results a later evaluation of the same target replaced, matching every given
        filter, oldest first (a redone job keeps its id: ``job_id`` finds its earlier results
        by index)."""
        clause, params = self.where(
            ("rule = ?", rule),
            ("target_id = ?", target_id),
            ("trace_id = ?", trace_id),
            ("job_id = ?", job_id),
        )
        rows = self.select(
            "SELECT job_id, record, superseded_at, reason FROM superseded_results"
            f"{clause} ORDER BY superseded_id LIMIT ?",
            (*params, limit),
        )
        return [
            Superseded(int(row[0]), record_from_json(row[1]), float(row[2]), row[3]) for row in rows
        ]
