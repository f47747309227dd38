"""The judge-result cache in SQL: one scored result per cache key, reused within an age.

The key is a digest the evaluator computes (metric identity, judge model, rebuilt case); the
store only keeps what it is given. Two workers that miss on the same key at once both call the
judge and both write: the write is an upsert, so the later one simply replaces the earlier one
(both are real results for the same question), on SQLite and PostgreSQL alike.

Example::

    store.put_cached_result(key, record, now=t)
    hit = store.cached_result(key, since=t - 3600)   # the record, or None
    store.prune_judge_cache(before=t - 3600)
"""

from __future__ import annotations

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store.columns import clean_text, record_from_json, record_to_json
from spanjudge._store.sql_base import SqlCore
from spanjudge.errors import ConfigError


class JudgeCacheQueries(SqlCore):
    """The judge cache over the shared SQL core: scored results kept by cache key."""

    def cached_result(self, cache_key: str, *, since: float) -> EvaluationRecord | None:
        """The result stored under ``cache_key`` at or after ``since`` (its hit counted), or
        None."""
        rows = self.select(
            "SELECT record FROM judge_cache WHERE cache_key = ? AND created_at >= ?",
            (cache_key, since),
        )
        if not rows:
            return None
        with self.transaction() as cur:
            cur.execute(
                self.q("UPDATE judge_cache SET hits = hits + 1 WHERE cache_key = ?"), (cache_key,)
            )
        return record_from_json(rows[0][0])

    def put_cached_result(self, cache_key: str, record: EvaluationRecord, *, now: float) -> None:
        """Keep a scored ``record`` under ``cache_key`` (replacing an older one: two workers
        racing on one key both write, the later wins). Anything but a scored result is a
        ``ValueError``."""
        if record.status != "scored":
            raise ConfigError(
                f"only scored results are cached; this one is {record.status!r} (key {cache_key})"
            )
        with self.transaction() as cur:
            cur.execute(
                self.q(
                    "INSERT INTO judge_cache (cache_key, metric, judge_model, record, created_at,"
                    " hits) VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (cache_key) DO UPDATE SET"
                    " metric = excluded.metric, judge_model = excluded.judge_model,"
                    " record = excluded.record, created_at = excluded.created_at, hits = 0"
                ),
                (
                    cache_key,
                    clean_text(record.metric),
                    clean_text(record.judge_model or ""),
                    record_to_json(record),
                    now,
                ),
            )

    def prune_judge_cache(self, *, before: float) -> int:
        """Delete entries stored before ``before``; returns how many."""
        with self.transaction() as cur:
            cur.execute(self.q("DELETE FROM judge_cache WHERE created_at < ?"), (before,))
            return max(cur.rowcount, 0)
