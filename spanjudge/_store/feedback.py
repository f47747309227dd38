"""Human feedback in SQL: labels in, matched to the judge's results when read, emitted once.

A label may arrive before its target was evaluated (or under a rule added later): rows are never
tied to a job. :func:`matches` decides, at read time, which results a label speaks about:

* a span label (``trace_id`` + ``span_id``): the results on that span;
* a trace label (``trace_id`` only): every span or trace result of that trace;
* a conversation label (``conversation_id``): the conversation results of that conversation;

always of the same metric, and of the label's rule when it names one.

Example::

    [feedback_id] = store.add_feedback([FeedbackRecord("faithfulness", "fail", trace_id=t)])
    for result, label in store.labelled_results(metric="faithfulness", since=t0):
        print(result.label, label.label)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge._store.columns import record_from_json
from spanjudge._store.sql_base import IDS_PER_LIST, SqlCore, wall

FEEDBACK_COLUMNS = (
    "feedback_id, metric, rule, trace_id, span_id, conversation_id, label, score, note,"
    " annotator, source, created_at, emitted_at"
)


def matches(feedback: FeedbackRecord, result: EvaluationRecord) -> bool:
    """Whether ``feedback`` labels ``result`` (see the module docstring)."""
    if feedback.metric != result.metric or (feedback.rule and feedback.rule != result.rule):
        return False
    if feedback.conversation_id:
        return result.target_type == "conversation" and result.target_id == feedback.conversation_id
    if result.target_type == "conversation" or result.trace_id != feedback.trace_id:
        return False
    return feedback.span_id is None or result.target_id == feedback.span_id


def _from_row(row: Sequence[Any]) -> FeedbackRecord:
    return FeedbackRecord(
        feedback_id=int(row[0]),
        metric=row[1],
        rule=row[2],
        trace_id=row[3],
        span_id=row[4],
        conversation_id=row[5],
        label=row[6],
        score=None if row[7] is None else float(row[7]),
        note=row[8],
        annotator=row[9],
        source=row[10],
        created_at=float(row[11]),
        emitted_at=None if row[12] is None else float(row[12]),
    )


def latest_per_annotator(
    pairs: Sequence[tuple[EvaluationRecord, FeedbackRecord]],
) -> list[tuple[EvaluationRecord, FeedbackRecord]]:
    """One pair per (result, annotator): a person's later label replaces their earlier one."""
    latest: dict[tuple[str, str, str, str | None], tuple[EvaluationRecord, FeedbackRecord]] = {}
    for result, label in pairs:
        key = (result.rule, result.target_type, result.target_id, label.annotator)
        kept = latest.get(key)
        if kept is None or (label.created_at, label.feedback_id) > (
            kept[1].created_at,
            kept[1].feedback_id,
        ):
            latest[key] = (result, label)
    return sorted(latest.values(), key=lambda pair: (pair[1].created_at, pair[1].feedback_id))


class FeedbackQueries(SqlCore):
    """:class:`~spanjudge._store.base.FeedbackLog` over the shared SQL core."""

    def add_feedback(
        self, items: Sequence[FeedbackRecord], *, now: float | None = None
    ) -> list[int]:
        created = wall() if now is None else now
        ids: list[int] = []
        with self.transaction() as cur:
            for item in items:
                cur.execute(
                    self.q(
                        "INSERT INTO feedback (metric, rule, trace_id, span_id, conversation_id,"
                        " label, score, note, annotator, source, created_at)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING feedback_id"
                    ),
                    (item.metric, item.rule, item.trace_id, item.span_id, item.conversation_id,
                     item.label, item.score, item.note, item.annotator, item.source,
                     item.created_at or created),
                )  # fmt: skip
                ids.append(int(cur.fetchone()[0]))
        return ids

    def feedback(
        self,
        *,
        metric: str | None = None,
        rule: str | None = None,
        trace_id: str | None = None,
        since: float | None = None,
        limit: int = 10_000,
    ) -> list[FeedbackRecord]:
        clause, params = self.where(
            ("metric = ?", metric),
            ("rule = ?", rule),
            ("trace_id = ?", trace_id),
            ("created_at >= ?", since),
        )
        rows = self.select(
            f"SELECT {FEEDBACK_COLUMNS} FROM feedback{clause}"
            " ORDER BY created_at, feedback_id LIMIT ?",
            (*params, limit),
        )
        return [_from_row(row) for row in rows]

    def feedback_target(
        self, *, trace_id: str | None, span_id: str | None, conversation_id: str | None
    ) -> tuple[str, str | None] | None:
        with self.transaction(write=False) as cur:
            if conversation_id:
                # the conversation's latest turn carries the event; its results if spans are gone
                cur.execute(
                    self.q(
                        "SELECT trace_id, span_id FROM spans WHERE conversation_id = ?"
                        " ORDER BY start_ns DESC LIMIT 1"
                    ),
                    (conversation_id,),
                )
                row = cur.fetchone()
                if row is None:
                    cur.execute(
                        self.q(
                            "SELECT trace_id FROM results WHERE target_type = 'conversation'"
                            " AND target_id = ? AND trace_id IS NOT NULL LIMIT 1"
                        ),
                        (conversation_id,),
                    )
                    found = cur.fetchone()
                    row = None if found is None else (found[0], None)
                return None if row is None else (str(row[0]), row[1])
            if not trace_id:
                return None
            if span_id:
                cur.execute(
                    self.q("SELECT 1 FROM spans WHERE trace_id = ? AND span_id = ?"),
                    (trace_id, span_id),
                )
                if cur.fetchone() is not None:
                    return trace_id, span_id
                cur.execute(
                    self.q("SELECT 1 FROM results WHERE trace_id = ? AND target_id = ? LIMIT 1"),
                    (trace_id, span_id),
                )
                return (trace_id, span_id) if cur.fetchone() is not None else None
            # a trace label goes on the root span (the first span when the root never came)
            cur.execute(
                self.q(
                    "SELECT span_id FROM spans WHERE trace_id = ?"
                    " ORDER BY CASE WHEN parent_span_id IS NULL OR parent_span_id = ''"
                    " THEN 0 ELSE 1 END, start_ns LIMIT 1"
                ),
                (trace_id,),
            )
            row = cur.fetchone()
            if row is not None:
                return trace_id, str(row[0])
            cur.execute(self.q("SELECT 1 FROM results WHERE trace_id = ? LIMIT 1"), (trace_id,))
            return (trace_id, None) if cur.fetchone() is not None else None

    def _results_near(self, labels: Sequence[FeedbackRecord]) -> list[EvaluationRecord]:
        """Results of the traces and conversations the labels name (candidates to match)."""
        traces = sorted({f.trace_id for f in labels if f.trace_id and not f.conversation_id})
        conversations = sorted({f.conversation_id for f in labels if f.conversation_id})
        found: list[EvaluationRecord] = []
        for sql, keys in (
            ("SELECT record FROM results WHERE trace_id IN ({})", traces),
            (
                "SELECT record FROM results WHERE target_type = 'conversation'"
                " AND target_id IN ({})",
                conversations,
            ),
        ):
            for start in range(0, len(keys), IDS_PER_LIST):
                chunk = keys[start : start + IDS_PER_LIST]
                rows = self.select(sql.format(", ".join("?" * len(chunk))), chunk)
                found.extend(record_from_json(row[0]) for row in rows)
        return found

    def latest_labels(
        self, *, metric: str | None = None, since: float | None = None
    ) -> list[FeedbackRecord]:
        """Every label created since ``since``, one per (annotator, target, metric, rule): the
        latest (a label sent again, or a person changing their mind, counts once). Oldest
        first. Unlike :meth:`feedback`, no limit: a window's figures read all of it."""
        clause, params = self.where(("metric = ?", metric), ("created_at >= ?", since))
        rows = self.select(
            f"SELECT {FEEDBACK_COLUMNS} FROM (SELECT {FEEDBACK_COLUMNS}, ROW_NUMBER() OVER"
            # a conversation label's trace is the latest turn's when it was given: not its key
            " (PARTITION BY annotator, metric, rule, conversation_id, span_id,"
            " CASE WHEN conversation_id IS NULL THEN trace_id END"
            f" ORDER BY created_at DESC, feedback_id DESC) AS newest FROM feedback{clause})"
            " latest WHERE newest = 1 ORDER BY created_at, feedback_id",
            params,
        )
        return [_from_row(row) for row in rows]

    def labelled_results(
        self,
        *,
        metric: str | None = None,
        rule: str | None = None,
        since: float | None = None,
    ) -> list[tuple[EvaluationRecord, FeedbackRecord]]:
        """(result, label) pairs of the labels since ``since`` (:meth:`latest_labels`: every
        one, each counted once) and the scored results they speak about; a person's latest
        label on a result is their one pair for it."""
        labels = self.latest_labels(metric=metric, since=since)
        results = [
            r
            for r in self._results_near(labels)
            if r.status == "scored" and (rule is None or r.rule == rule)
        ]
        pairs = [(r, f) for f in labels for r in results if matches(f, r)]
        return latest_per_annotator(pairs)

    def feedback_on(self, results: Sequence[EvaluationRecord]) -> list[list[FeedbackRecord]]:
        traces = sorted({r.trace_id for r in results if r.trace_id})
        conversations = sorted({r.target_id for r in results if r.target_type == "conversation"})
        labels: dict[int, FeedbackRecord] = {}
        for column, keys in (("trace_id", traces), ("conversation_id", conversations)):
            for start in range(0, len(keys), IDS_PER_LIST):
                chunk = keys[start : start + IDS_PER_LIST]
                rows = self.select(
                    f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE {column} IN"
                    f" ({', '.join('?' * len(chunk))})",
                    chunk,
                )
                labels.update((int(row[0]), _from_row(row)) for row in rows)
        ordered = sorted(labels.values(), key=lambda f: (f.created_at, f.feedback_id))
        return [[f for f in ordered if matches(f, r)] for r in results]

    def unemitted_feedback(self, *, limit: int = 100) -> list[FeedbackRecord]:
        rows = self.select(
            f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE emitted_at IS NULL"
            " ORDER BY feedback_id LIMIT ?",
            (limit,),
        )
        return [_from_row(row) for row in rows]

    def mark_feedback_emitted(self, feedback_ids: Sequence[int], *, now: float) -> None:
        self.update_each(
            (
                "UPDATE feedback SET emitted_at = ? WHERE feedback_id = ? AND emitted_at IS NULL",
                now,
                feedback_ids,
            )
        )
