"""The job queue in SQL: one job per (rule, target) ever, leased with one statement per claim.

A finished job runs again only when redone (:meth:`JobQueries.redo_jobs`: an errored result
retried, a conversation with new turns): its result then moves to ``superseded_results``, so a
target always has one current result and keeps every earlier one.

Example::

    store.enqueue_jobs([JobSpec("faithfulness", "llm", span_id, trace_id, span_id)], now=t)
    jobs = store.claim_jobs(owner="w1", limit=10, lease_seconds=120, now=t)
    store.redo_jobs([Redo(job_id, "retry_errors")], now=t)
"""

from __future__ import annotations

from collections.abc import Sequence

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store.columns import (
    JOB_COLUMNS,
    clean_text,
    job_from_row,
    record_from_json,
    record_to_json,
    summary_columns,
)
from spanjudge._store.models import (
    DONE,
    FAILED,
    LEASED,
    PENDING,
    Job,
    JobSpec,
    PlannedJob,
    Redo,
)
from spanjudge._store.schema import OPEN_JOBS
from spanjudge._store.sql_base import IDS_PER_LIST, Cursor, SqlCore, wall


def insert_jobs(store: SqlCore, cur: Cursor, jobs: Sequence[JobSpec], *, now: float) -> int:
    """Insert pending jobs inside the caller's transaction, a (rule, target) seen before
    ignored; returns how many were new. Rows go in the order given (planning's: oldest settled
    trace first), the order a claim takes them in after taking one of each waiting trace."""
    if not jobs:
        return 0
    # ids come from span attributes (a conversation id can hold anything): cleaned like the
    # span columns, or one hostile span would fail the planning of every tick
    rows = [
        (
            clean_text(j.rule),
            clean_text(j.target_type),
            clean_text(j.target_id),
            clean_text(j.trace_id),
            clean_text(j.span_id),
            clean_text(j.conversation_id),
            j.sample_rate,
            PENDING,
            now,
            now,
        )
        for j in jobs
    ]
    cur.executemany(
        store.q(
            "INSERT INTO jobs (rule, target_type, target_id, trace_id, span_id,"
            " conversation_id, sample_rate, state, available_at, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (rule, target_type, target_id) DO NOTHING"
        ),
        rows,
    )
    return max(cur.rowcount, 0)


# How many of the oldest due jobs a claim ranks by trace. Ranking every due job sorts the
# whole backlog on every claim; ranking the oldest 2,000 bounds it. Median per claim of 8 with
# 100,000 pending, SQLite / PostgreSQL (analyzed), measured: 0.3 / 2.0 ms in plain id order,
# 3.8 / 6.6 ms ranking 2,000 (7.7 / 7.2 ms with 10,000 pending), 18 / 14 ms ranking 5,000,
# 25 / 22 ms ranking 10,000. The cost: a trace with more than this many due jobs ahead of the
# others fills the batches until its backlog shrinks below it (issue 30's trace had 1,000).
CLAIM_WINDOW = 2_000
# Ranked candidates a claim of ``limit`` jobs tries to lock, per job: room for the rows other
# workers have locked at the same moment (PostgreSQL skips those); a claim that finds all its
# candidates locked takes fewer jobs, and the next claim takes the rest.
CLAIM_SLACK = 16


def _due(table: str) -> str:
    """The claimable jobs: open, and pending and due or leased with an expired lease; ``table``
    prefixes the columns (``"jobs."``). The same predicate as the jobs_open index's, first."""
    return (
        f"{table}state IN ('{PENDING}', '{LEASED}') AND (({table}state = '{PENDING}'"
        f" AND {table}available_at <= ?) OR ({table}state = '{LEASED}'"
        f" AND {table}lease_expires_at <= ?))"
    )


# The results columns a superseded result keeps (superseded_results has them, then its own).
_RESULT_COLUMNS = (
    "job_id, rule, metric, target_type, target_id, trace_id, status, cost, created_at,"
    " emitted_at, event_emitted_at, record"
)


class JobQueries(SqlCore):
    """Evaluation jobs over the shared SQL core: one per (rule, target) ever, leased; completing a
    job stores its result in the same transaction."""

    #: appended to a select that locks rows before an update (PostgreSQL: ``FOR UPDATE``)
    row_lock = ""

    def enqueue_jobs(self, jobs: Sequence[JobSpec], *, now: float) -> int:
        """Add pending jobs; a (rule, target_type, target_id) pair is enqueued once ever.
        Returns how many were new."""
        if not jobs:
            return 0
        with self.transaction() as cur:
            return insert_jobs(self, cur, jobs, now=now)

    def claim_jobs(self, *, owner: str, limit: int, lease_seconds: float, now: float) -> list[Job]:
        """Lease up to ``limit`` jobs to ``owner`` (pending ones due by ``now`` and leased ones
        whose lease expired), oldest first; ``attempts`` is incremented. Two concurrent claimers
        never get the same job."""
        if limit <= 0:
            return []
        # One statement. ``ranked`` numbers the oldest CLAIM_WINDOW due jobs within their
        # trace; ``picked`` takes the lowest ranks first, so a batch holds every waiting trace's
        # oldest job before a second job of any trace: one trace of 1,000 jobs planned first no
        # longer fills every batch while 16 other traces wait. Window functions cannot share a
        # level with FOR UPDATE, so PostgreSQL locks the jobs rows in ``picked`` (skipping rows
        # another worker locked, the due condition rechecked on the row it locked) and
        # materializes that locking CTE exactly once, so LIMIT holds; SQLite holds its write
        # lock for all of it. ``first`` keeps the CLAIM_SLACK * limit best ranked, and CROSS
        # JOIN makes SQLite walk them and look each job up by id: left to choose, SQLite scanned
        # every pending job, PostgreSQL hash-joined them all (38 / 55 ms a claim with 100,000).
        sql = (
            "WITH ranked AS (SELECT job_id, available_at, ROW_NUMBER() OVER (PARTITION BY"
            " trace_id ORDER BY available_at, job_id) AS trace_rank FROM (SELECT job_id,"
            f" trace_id, available_at FROM jobs{self.claim_index} WHERE {_due('')}"
            " ORDER BY job_id LIMIT ?) AS oldest),"
            " first AS (SELECT job_id, available_at, trace_rank FROM ranked"
            " ORDER BY trace_rank, available_at, job_id LIMIT ?),"
            " picked AS (SELECT jobs.job_id FROM first CROSS JOIN jobs"
            f" WHERE jobs.job_id = first.job_id AND {_due('jobs.')}"
            " ORDER BY first.trace_rank, first.available_at,"
            f" jobs.job_id LIMIT ?{self.claim_lock})"
            f" UPDATE jobs SET state = '{LEASED}', lease_owner = ?, lease_expires_at = ?,"
            " attempts = attempts + 1 WHERE job_id IN (SELECT job_id FROM picked)"
            f" RETURNING {JOB_COLUMNS}"
        )
        with self.transaction() as cur:
            cur.execute(
                self.q(sql),
                (
                    now,
                    now,
                    CLAIM_WINDOW,
                    limit * CLAIM_SLACK,
                    now,
                    now,
                    limit,
                    owner,
                    now + lease_seconds,
                ),
            )
            jobs = [job_from_row(row) for row in cur.fetchall()]
        jobs.sort(key=lambda job: job.job_id)
        return jobs

    def complete_job(
        self, job_id: int, *, owner: str, record: EvaluationRecord, now: float
    ) -> bool:
        """Store the result and finish the job (``failed`` when ``record.status == "error"``,
        else ``done``), only if ``owner`` still holds the lease. Returns False, writing nothing,
        when the lease was lost."""
        state = FAILED if record.status == "error" else DONE
        now = wall() if now is None else now  # tolerate a record without finished_at
        with self.transaction() as cur:
            cur.execute(
                self.q(
                    "UPDATE jobs SET state = ?, lease_owner = NULL, lease_expires_at = NULL"
                    f" WHERE job_id = ? AND state = '{LEASED}' AND lease_owner = ?"
                ),
                (state, job_id, owner),
            )
            if cur.rowcount != 1:
                return False
            cur.execute(
                self.q(
                    "INSERT INTO results (job_id, rule, metric, target_type, target_id, trace_id,"
                    " status, cost, created_at, record, segments, score, passed, weight)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                ),
                (
                    job_id,
                    clean_text(record.rule),
                    clean_text(record.metric),
                    clean_text(record.target_type),
                    clean_text(record.target_id),
                    clean_text(record.trace_id),
                    record.status,
                    record.cost,
                    now,
                    record_to_json(record),
                    *summary_columns(record),
                ),
            )
            return True

    def release_job(self, job_id: int, *, owner: str, retry_at: float | None = None) -> bool:
        """Give a leased job back (pending, attempts kept), due again at ``retry_at`` if given.
        False when ``owner`` does not hold it."""
        with self.transaction() as cur:
            cur.execute(
                self.q(
                    f"UPDATE jobs SET state = '{PENDING}', lease_owner = NULL,"
                    " lease_expires_at = NULL, available_at = COALESCE(?, available_at)"
                    f" WHERE job_id = ? AND state = '{LEASED}' AND lease_owner = ?"
                ),
                (retry_at, job_id, owner),
            )
            return cur.rowcount == 1

    def requeue_expired(self, *, now: float) -> int:
        """Put jobs whose lease expired back to pending. Returns how many."""
        with self.transaction() as cur:
            cur.execute(
                self.q(
                    f"UPDATE jobs SET state = '{PENDING}', lease_owner = NULL,"
                    f" lease_expires_at = NULL WHERE {OPEN_JOBS} AND state = '{LEASED}'"
                    " AND lease_expires_at <= ?"
                ),
                (now,),
            )
            return max(cur.rowcount, 0)

    def planned_targets(self, trace_ids: Sequence[str]) -> set[tuple[str, str, str]]:
        """``(rule, target_type, target_id)`` of every job planned on these traces (a span,
        the root, or a conversation whose last turn is there), so planning again passes them
        over without sampling or budget."""
        wanted = sorted({clean_text(t) or "" for t in trace_ids})
        found: set[tuple[str, str, str]] = set()
        with self.transaction(write=False) as cur:
            for start in range(0, len(wanted), IDS_PER_LIST):
                chunk = wanted[start : start + IDS_PER_LIST]
                cur.execute(
                    self.q(
                        "SELECT rule, target_type, target_id FROM jobs"
                        f" WHERE trace_id IN ({', '.join('?' * len(chunk))})"
                    ),
                    chunk,
                )
                found.update((row[0], row[1], row[2]) for row in cur.fetchall())
        return found

    def conversation_jobs(
        self, conversation_ids: Sequence[str], *, rules: Sequence[str]
    ) -> dict[tuple[str, str], PlannedJob]:
        # ids as the columns hold them (cleaned), handed back under the caller's own
        """The jobs of these rules on these conversations, by ``(rule, conversation id)``, each
        with its state and current result."""
        asked = {clean_text(c) or "": c for c in conversation_ids}
        wanted = sorted(asked)
        found: dict[tuple[str, str], PlannedJob] = {}
        with self.transaction(write=False) as cur:
            for rule in sorted(set(rules)):  # the rule leads the jobs' unique index
                for start in range(0, len(wanted), IDS_PER_LIST):
                    chunk = wanted[start : start + IDS_PER_LIST]
                    cur.execute(
                        self.q(
                            "SELECT j.job_id, j.target_id, j.state, r.record FROM jobs j"
                            " LEFT JOIN results r ON r.job_id = j.job_id WHERE j.rule = ?"
                            " AND j.target_type = 'conversation'"
                            f" AND j.target_id IN ({', '.join('?' * len(chunk))})"
                        ),
                        (rule, *chunk),
                    )
                    for job_id, target_id, state, record in cur.fetchall():
                        conversation_id = asked.get(target_id, target_id)
                        found[(rule, conversation_id)] = PlannedJob(
                            int(job_id),
                            rule,
                            conversation_id,
                            state,
                            None if record is None else record_from_json(record),
                        )
        return found

    def redo_jobs(self, redos: Sequence[Redo], *, now: float) -> int:
        """Run finished (``done``/``failed``) jobs again: each current result moves to the
        superseded results with its reason, the job is pending and due at ``now`` with its
        attempts reset. Jobs not finished are left alone. Returns how many were redone."""
        by_id = {redo.job_id: redo for redo in redos}
        wanted = sorted(by_id)
        if not wanted:
            return 0
        with self.transaction() as cur:
            finished: list[int] = []
            for start in range(0, len(wanted), IDS_PER_LIST):
                # PostgreSQL: lock the jobs first (in id order), so a redo racing another
                # redo or a claim sees the job as the other left it
                chunk = wanted[start : start + IDS_PER_LIST]
                cur.execute(
                    self.q(
                        f"SELECT job_id FROM jobs WHERE job_id IN ({', '.join('?' * len(chunk))})"
                        f" AND state IN ('{DONE}', '{FAILED}') ORDER BY job_id{self.row_lock}"
                    ),
                    chunk,
                )
                finished.extend(int(row[0]) for row in cur.fetchall())
            if not finished:
                return 0
            redone = [by_id[job_id] for job_id in sorted(finished)]
            cur.executemany(
                self.q(
                    f"INSERT INTO superseded_results ({_RESULT_COLUMNS}, superseded_at, reason)"
                    f" SELECT {_RESULT_COLUMNS}, ?, ? FROM results WHERE job_id = ?"
                ),
                [(now, redo.reason, redo.job_id) for redo in redone],
            )
            cur.executemany(
                self.q("DELETE FROM results WHERE job_id = ?"),
                [(redo.job_id,) for redo in redone],
            )
            cur.executemany(
                self.q(
                    f"UPDATE jobs SET state = '{PENDING}', attempts = 0, available_at = ?,"
                    " lease_owner = NULL, lease_expires_at = NULL,"
                    " trace_id = COALESCE(?, trace_id), span_id = COALESCE(?, span_id)"
                    " WHERE job_id = ?"
                ),
                [
                    (now, clean_text(redo.trace_id), clean_text(redo.span_id), redo.job_id)
                    for redo in redone
                ],
            )
            return len(redone)
