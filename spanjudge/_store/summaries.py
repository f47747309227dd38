"""Sums for summaries: per (rule, metric, segment) the counts and weighted sums that pass
rates, mean scores and their intervals are computed from (``evaluators/_review/estimates``).

Every quantity is a sum, so groups add up exactly: SQL sums per (rule, metric, segments JSON)
over the ``results`` columns written with each result (``rows.summary_columns``); the few
distinct segment texts are then read in Python and merged by the wanted key. A million results
are one grouped scan, never a million parsed records. Results stored before those columns
existed (``weight IS NULL``) are summed from their records, through the same
:func:`~spanjudge._store.columns.summary_columns`.

Example::

    sums = store.summary_sums(by="service.version", since=time.time() - 86400)
    for (rule, metric, version), s in sums.items():
        print(rule, version, s.scored, s.pass_weight)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store.columns import record_from_json, summary_columns
from spanjudge._store.sql_base import SqlCore

__all__ = [
    "ALL",
    "UNSET",
    "SegmentSums",
    "SummaryQueries",
    "SummarySource",
    "add_record",
    "segment_of",
]

ALL = "all"
"""The segment value when results are not split (``by=None``)."""
UNSET = "(none)"
"""The segment value of results that do not carry the key."""

SumsKey = tuple[str, str, str]  # rule, metric, segment value


@dataclass(slots=True)
class SegmentSums:
    """Counts and weighted sums of one group of results (w: weight, y: passed, s: score)."""

    scored: int = 0
    skipped: int = 0
    errors: int = 0
    verdicts: int = 0  # results with a pass/fail verdict
    pass_weight: float = 0.0  # sum w over verdicts
    pass_weight2: float = 0.0  # sum w^2
    passed_weight: float = 0.0  # sum w*y
    passed_weight2: float = 0.0  # sum w^2*y
    scores: int = 0  # results with a score
    score_weight: float = 0.0  # sum w over scores
    score_weight2: float = 0.0  # sum w^2
    score_sum: float = 0.0  # sum w*s
    score_sum_w2: float = 0.0  # sum w^2*s
    score_sq_w2: float = 0.0  # sum w^2*s^2
    last_at: float = 0.0  # when the newest result was stored (a maximum, not a sum)
    first_at: float = math.inf  # when the oldest was (a minimum): a version's first traffic

    def add_result(
        self, weight: float, passed: int | None = None, score: float | None = None
    ) -> None:
        """One result's weighted sums: its verdict (1 pass, 0 fail) and its score, each when
        it has one. The status counts (``scored``...) and times are the caller's."""
        w2 = weight * weight
        if passed is not None:
            self.verdicts += 1
            self.pass_weight += weight
            self.pass_weight2 += w2
            self.passed_weight += weight * passed
            self.passed_weight2 += w2 * passed
        if score is not None:
            self.scores += 1
            self.score_weight += weight
            self.score_weight2 += w2
            self.score_sum += weight * score
            self.score_sum_w2 += w2 * score
            self.score_sq_w2 += w2 * score * score

    def add(self, other: SegmentSums) -> None:
        """Add ``other``'s counts and sums into this one."""
        for f in fields(self):
            if f.name not in ("last_at", "first_at"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.last_at = max(self.last_at, other.last_at)
        self.first_at = min(self.first_at, other.first_at)


class SummarySource(Protocol):
    """What reads summary sums: the SQL stores (:class:`SummaryQueries`), and the stand-ins of
    tests and benchmarks. The allocation, the worker's numbers and the CLI take one."""

    def summary_sums(
        self,
        *,
        by: str | None = None,
        since: float | None = None,
        until: float | None = None,
        rule: str | None = None,
    ) -> Mapping[SumsKey, SegmentSums]: ...


# the SELECT list in SegmentSums' field order
_SUMS_SQL = (
    "SUM(CASE WHEN status = 'scored' THEN 1 ELSE 0 END),"
    " SUM(CASE WHEN status = 'skipped' THEN 1 ELSE 0 END),"
    " SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END),"
    " COUNT(passed),"
    " SUM(CASE WHEN passed IS NOT NULL THEN weight END),"
    " SUM(CASE WHEN passed IS NOT NULL THEN weight * weight END),"
    " SUM(weight * passed), SUM(weight * weight * passed),"
    " COUNT(score),"
    " SUM(CASE WHEN score IS NOT NULL THEN weight END),"
    " SUM(CASE WHEN score IS NOT NULL THEN weight * weight END),"
    " SUM(weight * score), SUM(weight * weight * score), SUM(weight * weight * score * score),"
    " MAX(created_at), MIN(created_at)"
)


def _sums_from_row(values: Iterable[Any]) -> SegmentSums:
    out = SegmentSums()
    for f, value in zip(fields(SegmentSums), values, strict=True):
        kind = int if f.type in ("int", int) else float
        setattr(out, f.name, kind(value or 0))
    return out


def segment_of(segments: Mapping[str, str] | None, by: str | None, service: str | None) -> str:
    """The value a result is grouped under for key ``by`` (``ALL`` without a key, ``UNSET``
    when the result lacks it; ``service`` falls back on the result's service name)."""
    if by is None:
        return ALL
    value = (segments or {}).get(by)
    if value is None and by == "service":
        value = service
    return value if value else UNSET


def add_record(out: dict[SumsKey, SegmentSums], record: EvaluationRecord, by: str | None) -> None:
    """Add one result to ``out`` (the path of results without summary columns, and of tests)."""
    _segments, score, passed, weight = summary_columns(record)
    one = SegmentSums()
    if record.status == "scored":
        one.scored = 1
    elif record.status == "skipped":
        one.skipped = 1
    else:
        one.errors = 1
    one.add_result(weight, passed, score)
    one.last_at = one.first_at = record.finished_at or 0.0
    key = (record.rule, record.metric, segment_of(record.segments, by, record.service_name))
    out.setdefault(key, SegmentSums()).add(one)


class SummaryQueries(SqlCore):
    """``summary_sums()``: the sums of every (rule, metric, segment) in a window."""

    def summary_sums(
        self,
        *,
        by: str | None = None,
        since: float | None = None,
        until: float | None = None,
        rule: str | None = None,
    ) -> dict[SumsKey, SegmentSums]:
        """Sums per (rule, metric, value of ``by``) of the results created in
        [``since``, ``until``) (every rule, or ``rule``)."""
        clause, params = self.where(
            ("created_at >= ?", since), ("created_at < ?", until), ("rule = ?", rule)
        )
        fresh = f"{clause} AND weight IS NOT NULL" if clause else " WHERE weight IS NOT NULL"
        rows = self.select(
            f"SELECT rule, metric, segments, {_SUMS_SQL} FROM results{fresh}"
            " GROUP BY rule, metric, segments",
            params,
        )
        out: dict[SumsKey, SegmentSums] = {}
        parsed: dict[str | None, dict[str, str]] = {}
        for row in rows:
            text = row[2]
            if text not in parsed:
                parsed[text] = json.loads(text) if text else {}
            key = (row[0], row[1], segment_of(parsed[text], by, None))
            out.setdefault(key, SegmentSums()).add(_sums_from_row(row[3:]))
        old = f"{clause} AND weight IS NULL" if clause else " WHERE weight IS NULL"
        for (text,) in self.select(f"SELECT record FROM results{old}", params):
            add_record(out, record_from_json(text), by)
        return out
