"""The store logic both SQL backends share; only connections and a few dialect words differ.

Statements are written once with ``?`` placeholders; a backend that wants ``%s`` gets them
rewritten once and cached. Every value travels as a bound parameter: rule names, attribute names
and ids are data, never SQL text.
"""

from __future__ import annotations

import dataclasses
import json
import time
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from spanjudge.exporters.records import EvaluationRecord, SpanEvent, SpanRecord
from spanjudge.exporters.store.base import (
    DONE,
    FAILED,
    LEASED,
    ORPHAN_SETTLE_FACTOR,
    PENDING,
    Job,
    JobSpec,
    OutboxClaim,
    OutboxEntry,
    OutboxItem,
    SpanStore,
    StoreStats,
)


class Cursor(Protocol):
    """The DB-API subset both sqlite3 and psycopg cursors provide."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...
    def executemany(self, sql: Any, params: Any, /) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...


# Tokens filled per dialect: {id_pk} an auto-increment key, {real} a double, {bigint} 64 bits.
# Migrations are append-only: version N is MIGRATIONS[N - 1]; a release that changes the schema
# adds a list of statements, and every database catches up at start-up.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE IF NOT EXISTS spans (
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            parent_span_id TEXT,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            start_ns {bigint} NOT NULL,
            end_ns {bigint} NOT NULL,
            status_code TEXT NOT NULL,
            status_message TEXT,
            attributes TEXT NOT NULL,
            resource TEXT NOT NULL,
            events TEXT NOT NULL,
            scope_name TEXT,
            service_name TEXT,
            conversation_id TEXT,
            arrived_at {real} NOT NULL,
            PRIMARY KEY (trace_id, span_id))""",
        "CREATE INDEX IF NOT EXISTS spans_conversation ON spans (conversation_id)"
        " WHERE conversation_id IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS spans_arrived ON spans (arrived_at)",
        """CREATE TABLE IF NOT EXISTS traces (
            trace_id TEXT PRIMARY KEY,
            first_arrival {real} NOT NULL,
            last_arrival {real} NOT NULL,
            root_ended INTEGER NOT NULL DEFAULT 0,
            planned_at {real})""",
        "CREATE INDEX IF NOT EXISTS traces_unplanned ON traces (last_arrival)"
        " WHERE planned_at IS NULL",
        "CREATE INDEX IF NOT EXISTS traces_last ON traces (last_arrival)",
        """CREATE TABLE IF NOT EXISTS conversations (
            conversation_id TEXT PRIMARY KEY,
            first_arrival {real} NOT NULL,
            last_arrival {real} NOT NULL,
            planned_at {real})""",
        "CREATE INDEX IF NOT EXISTS conversations_unplanned ON conversations (last_arrival)"
        " WHERE planned_at IS NULL",
        "CREATE INDEX IF NOT EXISTS conversations_last ON conversations (last_arrival)",
        """CREATE TABLE IF NOT EXISTS jobs (
            job_id {id_pk},
            rule TEXT NOT NULL,
            target_type TEXT NOT NULL,
            target_id TEXT NOT NULL,
            trace_id TEXT,
            span_id TEXT,
            conversation_id TEXT,
            sample_rate {real},
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_expires_at {real},
            available_at {real} NOT NULL,
            created_at {real} NOT NULL,
            UNIQUE (rule, target_type, target_id))""",
        # Claims scan only open jobs, however many finished ones pile up.
        "CREATE INDEX IF NOT EXISTS jobs_open ON jobs (job_id)"
        " WHERE state IN ('pending', 'leased')",
        "CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created_at)",
        """CREATE TABLE IF NOT EXISTS results (
            job_id {bigint} PRIMARY KEY,
            rule TEXT NOT NULL,
            metric TEXT NOT NULL,
            target_type TEXT NOT NULL,
            target_id TEXT NOT NULL,
            trace_id TEXT,
            status TEXT NOT NULL,
            cost {real},
            created_at {real} NOT NULL,
            emitted_at {real},
            record TEXT NOT NULL,
            UNIQUE (rule, target_type, target_id))""",
        "CREATE INDEX IF NOT EXISTS results_unemitted ON results (job_id) WHERE emitted_at IS NULL",
        "CREATE INDEX IF NOT EXISTS results_rule ON results (rule, created_at)",
        "CREATE INDEX IF NOT EXISTS results_trace ON results (trace_id)",
        "CREATE INDEX IF NOT EXISTS results_created ON results (created_at)",
    ],
    [
        # Enrich mode: every received span once, forwarded when due (at once, or after its
        # evaluations when held); written in the spans' own transaction.
        """CREATE TABLE IF NOT EXISTS outbox (
            entry_id {id_pk},
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            hold INTEGER NOT NULL,
            release_at {real} NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_expires_at {real},
            forwarded_at {real},
            UNIQUE (trace_id, span_id))""",
        "CREATE INDEX IF NOT EXISTS outbox_due ON outbox (release_at)"
        " WHERE forwarded_at IS NULL",
        "CREATE INDEX IF NOT EXISTS outbox_forwarded ON outbox (forwarded_at)"
        " WHERE forwarded_at IS NOT NULL",
        # release_held() looks up the open jobs of one span
        "CREATE INDEX IF NOT EXISTS jobs_span ON jobs (trace_id, span_id)",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)

_SPAN_COLUMNS = (
    "trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code,"
    " status_message, attributes, resource, events, scope_name"
)
_SPAN_TYPES = ("text",) * 5 + ("bigint",) * 2 + ("text",) * 8 + ("real",)
_JOB_COLUMNS = (
    "job_id, rule, target_type, target_id, trace_id, span_id, conversation_id, sample_rate,"
    " state, attempts, lease_owner, lease_expires_at"
)
_OPEN = f"state IN ('{PENDING}', '{LEASED}')"
_SPAN_COLUMNS_S = ", ".join(f"s.{c.strip()}" for c in _SPAN_COLUMNS.split(","))
_EVALUATION_FIELDS = frozenset(f.name for f in dataclasses.fields(EvaluationRecord))

# ASCII escapes: a lone surrogate from a hostile payload stays storable (UTF-8 would refuse it).
_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode
_loads = json.loads


def _clean(text: str | None) -> str | None:
    """Text a database column accepts: PostgreSQL refuses NUL, both refuse lone surrogates
    (UTF-8 cannot encode them). Foreign spans carry anything; one bad name must not sink the
    whole batch."""
    if text is None or (text.isascii() and "\x00" not in text):
        return text
    text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def span_row(span: SpanRecord, arrived_at: float) -> tuple[Any, ...]:
    """A span as a ``spans`` row (JSON text for the open-ended parts)."""
    events = (
        _dumps([{"name": e.name, "t": e.time_unix_nano, "a": e.attributes} for e in span.events])
        if span.events
        else "[]"
    )
    return (
        _clean(span.trace_id),
        _clean(span.span_id),
        _clean(span.parent_span_id or None),
        _clean(span.name),
        _clean(span.kind),
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        _clean(span.status_code),
        _clean(span.status_message),
        _dumps(span.attributes) if span.attributes else "{}",
        _dumps(span.resource) if span.resource else "{}",
        events,
        _clean(span.scope_name),
        _clean(span.service_name),
        _clean(span.conversation_id),
        arrived_at,
    )


def span_from_row(row: Sequence[Any]) -> SpanRecord:
    events = [SpanEvent(e["name"], e["t"], e["a"]) for e in _loads(row[11])]
    return SpanRecord(
        trace_id=row[0],
        span_id=row[1],
        parent_span_id=row[2],
        name=row[3],
        kind=row[4],
        start_time_unix_nano=int(row[5]),
        end_time_unix_nano=int(row[6]),
        status_code=row[7],
        status_message=row[8],
        attributes=_loads(row[9]),
        resource=_loads(row[10]),
        events=events,
        scope_name=row[12],
    )


def record_to_json(record: EvaluationRecord) -> str:
    return _dumps(dataclasses.asdict(record))


def record_from_json(text: str) -> EvaluationRecord:
    data = _loads(text)
    # Fields a later release added are ignored rather than breaking an older reader.
    return EvaluationRecord(**{k: v for k, v in data.items() if k in _EVALUATION_FIELDS})


def _job_from_row(row: Sequence[Any]) -> Job:
    return Job(
        job_id=int(row[0]),
        rule=row[1],
        target_type=row[2],
        target_id=row[3],
        trace_id=row[4],
        span_id=row[5],
        conversation_id=row[6],
        sample_rate=row[7],
        state=row[8],
        attempts=int(row[9]),
        lease_owner=row[10],
        lease_expires_at=row[11],
    )


class SqlStore(SpanStore):
    """:class:`SpanStore` over a DB-API connection; subclasses supply transactions and dialect."""

    #: scalar maximum of two values (SQLite ``MAX``, PostgreSQL ``GREATEST``)
    greatest = "MAX"
    #: appended to the claim sub-select (PostgreSQL: ``FOR UPDATE SKIP LOCKED``)
    claim_lock = ""
    #: index hint for the claim scan: walk open jobs in id order and stop at LIMIT, rather
    #: than sort every open job (SQLite's planner guesses otherwise without statistics)
    claim_index = " INDEXED BY jobs_open"
    #: placeholder style of the driver
    placeholder = "?"
    #: schema tokens
    types: ClassVar[dict[str, str]] = {
        "id_pk": "INTEGER PRIMARY KEY",
        "real": "REAL",
        "bigint": "INTEGER",
    }

    def __init__(self) -> None:
        self._sql_cache: dict[str, str] = {}

    # ---------------------------------------------------------------- hooks
    @abstractmethod
    def transaction(self, *, write: bool = True) -> AbstractContextManager[Cursor]:
        """A cursor inside one transaction: committed on success, rolled back on error. Driver
        errors leave it as :class:`StoreError`. ``write=True`` takes the write lock up front."""

    def _migration_lock(self, cur: Cursor) -> None:
        """Serialize concurrent migrations (SQLite: the write transaction already does)."""

    # ---------------------------------------------------------------- helpers
    def q(self, sql: str) -> str:
        """``sql`` in the driver's placeholder style (cached)."""
        out = self._sql_cache.get(sql)
        if out is None:
            out = sql if self.placeholder == "?" else sql.replace("?", self.placeholder)
            self._sql_cache[sql] = out
        return out

    def insert_rows(
        self,
        cur: Cursor,
        head: str,
        types: Sequence[str],
        rows: Sequence[Sequence[Any]],
        tail: str,
    ) -> None:
        """``head`` + values + ``tail`` for many rows (``types``: text|int|bigint|real per
        column). Default: ``executemany``; a dialect may send one set-based statement."""
        values = ", ".join("?" * len(types))
        cur.executemany(self.q(f"{head} VALUES ({values}){tail}"), rows)

    def migrate(self) -> None:
        """Create or upgrade the schema to the last version in :data:`MIGRATIONS`."""
        with self.transaction() as cur:
            self.migrate_in(cur)

    def migrate_in(self, cur: Cursor) -> None:
        """Run the pending migrations inside the caller's (write) transaction."""
        self._migration_lock(cur)
        cur.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            f"version INTEGER NOT NULL, applied_at {self.types['real']} NOT NULL)"
        )
        cur.execute("SELECT MAX(version) FROM schema_version")
        current = cur.fetchone()[0] or 0
        for version in range(current + 1, len(MIGRATIONS) + 1):
            for statement in MIGRATIONS[version - 1]:
                cur.execute(statement.format(**self.types))
            cur.execute(
                self.q("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)"),
                (version, _wall()),
            )

    def schema_version(self) -> int:
        with self.transaction(write=False) as cur:
            cur.execute("SELECT MAX(version) FROM schema_version")
            return int(cur.fetchone()[0] or 0)

    # ---------------------------------------------------------------- spans
    def write_spans(
        self,
        spans: Sequence[SpanRecord],
        *,
        now: float | None = None,
        outbox: Sequence[OutboxEntry] = (),
    ) -> None:
        if not spans:
            return
        arrived = _wall() if now is None else now
        # Sorted by key: concurrent writers take row locks in one order and cannot deadlock.
        spans = sorted(spans, key=lambda s: (s.trace_id, s.span_id))
        rows = [span_row(span, arrived) for span in spans]
        roots: dict[str, int] = {}
        conversations: set[str] = set()
        for span, row in zip(spans, rows, strict=True):
            ended = 1 if (not row[2] and span.end_time_unix_nano > 0) else 0
            roots[span.trace_id] = max(roots.get(span.trace_id, 0), ended)
            if row[14] is not None:
                conversations.add(row[14])
        trace_rows = [(t, arrived, arrived, roots[t]) for t in sorted(roots)]
        conversation_rows = [(c, arrived, arrived) for c in sorted(conversations)]
        g = self.greatest
        with self.transaction() as cur:
            self.insert_rows(
                cur,
                f"INSERT INTO spans ({_SPAN_COLUMNS}, service_name, conversation_id, arrived_at)",
                _SPAN_TYPES,
                rows,
                " ON CONFLICT (trace_id, span_id) DO NOTHING",
            )
            self.insert_rows(
                cur,
                "INSERT INTO traces (trace_id, first_arrival, last_arrival, root_ended)",
                ("text", "real", "real", "int"),
                trace_rows,
                " ON CONFLICT (trace_id) DO UPDATE SET"
                f" last_arrival = {g}(traces.last_arrival, excluded.last_arrival),"
                f" root_ended = {g}(traces.root_ended, excluded.root_ended)",
            )
            if conversation_rows:
                self.insert_rows(
                    cur,
                    "INSERT INTO conversations (conversation_id, first_arrival, last_arrival)",
                    ("text", "real", "real"),
                    conversation_rows,
                    " ON CONFLICT (conversation_id) DO UPDATE SET"
                    f" last_arrival = {g}(conversations.last_arrival, excluded.last_arrival)",
                )
            if outbox:
                # once ever per span: a re-delivered span (a client retry) is not sent twice
                cur.executemany(
                    self.q(
                        "INSERT INTO outbox (trace_id, span_id, hold, release_at)"
                        " VALUES (?, ?, ?, ?) ON CONFLICT (trace_id, span_id) DO NOTHING"
                    ),
                    sorted(
                        (_clean(e.trace_id), _clean(e.span_id), 1 if e.hold else 0, e.release_at)
                        for e in outbox
                    ),
                )

    def settled_traces(self, *, settle_seconds: float, now: float, limit: int = 500) -> list[str]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT trace_id FROM traces WHERE planned_at IS NULL AND last_arrival <= ?"
                    " AND (root_ended = 1 OR last_arrival <= ?)"
                    # Index order only: a tie-breaker column would sort the whole backlog.
                    " ORDER BY last_arrival LIMIT ?"
                ),
                (now - settle_seconds, now - ORPHAN_SETTLE_FACTOR * settle_seconds, limit),
            )
            return [row[0] for row in cur.fetchall()]

    def idle_conversations(self, *, idle_seconds: float, now: float, limit: int = 500) -> list[str]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT conversation_id FROM conversations WHERE planned_at IS NULL"
                    " AND last_arrival <= ? ORDER BY last_arrival LIMIT ?"
                ),
                (now - idle_seconds, limit),
            )
            return [row[0] for row in cur.fetchall()]

    def mark_planned(
        self, *, traces: Sequence[str] = (), conversations: Sequence[str] = (), now: float
    ) -> None:
        if not traces and not conversations:
            return
        with self.transaction() as cur:
            if traces:
                cur.executemany(
                    self.q("UPDATE traces SET planned_at = ? WHERE trace_id = ?"),
                    [(now, t) for t in sorted(set(traces))],
                )
            if conversations:
                cur.executemany(
                    self.q("UPDATE conversations SET planned_at = ? WHERE conversation_id = ?"),
                    [(now, c) for c in sorted(set(conversations))],
                )

    def trace_spans(self, trace_id: str) -> list[SpanRecord]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    f"SELECT {_SPAN_COLUMNS} FROM spans WHERE trace_id = ?"
                    " ORDER BY start_ns, span_id"
                ),
                (trace_id,),
            )
            return [span_from_row(row) for row in cur.fetchall()]

    def conversation_spans(self, conversation_id: str) -> list[SpanRecord]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    f"SELECT {_SPAN_COLUMNS} FROM spans WHERE trace_id IN"
                    " (SELECT DISTINCT trace_id FROM spans WHERE conversation_id = ?)"
                    " ORDER BY start_ns, trace_id, span_id"
                ),
                (conversation_id,),
            )
            return [span_from_row(row) for row in cur.fetchall()]

    def targets_since(self, *, since: float, until: float) -> tuple[list[str], list[str]]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT trace_id FROM traces WHERE last_arrival >= ? AND first_arrival <= ?"
                    " ORDER BY first_arrival, trace_id"
                ),
                (since, until),
            )
            traces = [row[0] for row in cur.fetchall()]
            cur.execute(
                self.q(
                    "SELECT conversation_id FROM conversations WHERE last_arrival >= ?"
                    " AND first_arrival <= ? ORDER BY first_arrival, conversation_id"
                ),
                (since, until),
            )
            return traces, [row[0] for row in cur.fetchall()]

    def delete_older_than(self, cutoff: float) -> int:
        with self.transaction() as cur:
            cur.execute(self.q("DELETE FROM spans WHERE arrived_at < ?"), (cutoff,))
            deleted = max(cur.rowcount, 0)
            cur.execute(
                self.q("DELETE FROM outbox WHERE forwarded_at IS NOT NULL AND forwarded_at < ?"),
                (cutoff,),
            )
            cur.execute(self.q("DELETE FROM traces WHERE last_arrival < ?"), (cutoff,))
            cur.execute(self.q("DELETE FROM conversations WHERE last_arrival < ?"), (cutoff,))
            return deleted

    # ---------------------------------------------------------------- jobs
    def enqueue_jobs(self, jobs: Sequence[JobSpec], *, now: float) -> int:
        if not jobs:
            return 0
        # ids come from span attributes (a conversation id can hold anything): cleaned like the
        # span columns, or one hostile span would fail the planning of every tick
        rows = [
            (
                _clean(j.rule),
                _clean(j.target_type),
                _clean(j.target_id),
                _clean(j.trace_id),
                _clean(j.span_id),
                _clean(j.conversation_id),
                j.sample_rate,
                PENDING,
                now,
                now,
            )
            for j in jobs
        ]
        with self.transaction() as cur:
            cur.executemany(
                self.q(
                    "INSERT INTO jobs (rule, target_type, target_id, trace_id, span_id,"
                    " conversation_id, sample_rate, state, available_at, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (rule, target_type, target_id) DO NOTHING"
                ),
                rows,
            )
            return max(cur.rowcount, 0)

    def claim_jobs(self, *, owner: str, limit: int, lease_seconds: float, now: float) -> list[Job]:
        if limit <= 0:
            return []
        # One statement: the CTE picks due jobs (PostgreSQL skips rows another worker has
        # locked, and materializes a locking CTE exactly once, so LIMIT holds), the UPDATE
        # leases them; SQLite holds its write lock for all of it.
        sql = (
            f"WITH picked AS (SELECT job_id FROM jobs{self.claim_index} WHERE {_OPEN}"
            f" AND ((state = '{PENDING}' AND available_at <= ?)"
            f" OR (state = '{LEASED}' AND lease_expires_at <= ?))"
            f" ORDER BY job_id LIMIT ?{self.claim_lock})"
            f" UPDATE jobs SET state = '{LEASED}', lease_owner = ?, lease_expires_at = ?,"
            " attempts = attempts + 1 WHERE job_id IN (SELECT job_id FROM picked)"
            f" RETURNING {_JOB_COLUMNS}"
        )
        with self.transaction() as cur:
            cur.execute(self.q(sql), (now, now, limit, owner, now + lease_seconds))
            jobs = [_job_from_row(row) for row in cur.fetchall()]
        jobs.sort(key=lambda job: job.job_id)
        return jobs

    def complete_job(
        self, job_id: int, *, owner: str, record: EvaluationRecord, now: float
    ) -> bool:
        state = FAILED if record.status == "error" else DONE
        now = _wall() if now is None else now  # tolerate a record without finished_at
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
                    " status, cost, created_at, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING"
                ),
                (
                    job_id,
                    _clean(record.rule),
                    _clean(record.metric),
                    _clean(record.target_type),
                    _clean(record.target_id),
                    _clean(record.trace_id),
                    record.status,
                    record.cost,
                    now,
                    record_to_json(record),
                ),
            )
            return True

    def release_job(self, job_id: int, *, owner: str, retry_at: float | None = None) -> bool:
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
        with self.transaction() as cur:
            cur.execute(
                self.q(
                    f"UPDATE jobs SET state = '{PENDING}', lease_owner = NULL,"
                    f" lease_expires_at = NULL WHERE {_OPEN} AND state = '{LEASED}'"
                    " AND lease_expires_at <= ?"
                ),
                (now,),
            )
            return max(cur.rowcount, 0)

    # ---------------------------------------------------------------- results
    def unemitted_results(self, *, limit: int = 100) -> list[tuple[int, EvaluationRecord]]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT job_id, record FROM results WHERE emitted_at IS NULL"
                    " ORDER BY job_id LIMIT ?"
                ),
                (limit,),
            )
            return [(int(row[0]), record_from_json(row[1])) for row in cur.fetchall()]

    def mark_emitted(self, job_ids: Sequence[int], *, now: float) -> None:
        if not job_ids:
            return
        with self.transaction() as cur:
            cur.executemany(
                self.q("UPDATE results SET emitted_at = ? WHERE job_id = ? AND emitted_at IS NULL"),
                [(now, job_id) for job_id in sorted(set(job_ids))],
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
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(f"SELECT record FROM results{clause} ORDER BY created_at, job_id LIMIT ?"),
                (*params, limit),
            )
            return [record_from_json(row[0]) for row in cur.fetchall()]

    def results_cost_since(self, *, rule: str, since: float) -> float:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q("SELECT SUM(cost) FROM results WHERE rule = ? AND created_at >= ?"),
                (rule, since),
            )
            return float(cur.fetchone()[0] or 0.0)

    # ---------------------------------------------------------------- outbox
    def release_held(self, *, now: float) -> int:
        with self.transaction() as cur:
            cur.execute(
                self.q(
                    "UPDATE outbox SET release_at = ? WHERE forwarded_at IS NULL AND hold = 1"
                    " AND release_at > ? AND EXISTS (SELECT 1 FROM traces t"
                    " WHERE t.trace_id = outbox.trace_id AND t.planned_at IS NOT NULL)"
                    " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.trace_id = outbox.trace_id"
                    " AND j.span_id = outbox.span_id AND j.target_type <> 'conversation'"
                    f" AND j.{_OPEN})"
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
                    f"SELECT o.entry_id, o.hold, o.attempts, {_SPAN_COLUMNS_S} FROM outbox o"
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
        if not entry_ids:
            return
        with self.transaction() as cur:
            cur.executemany(
                self.q(
                    "UPDATE outbox SET forwarded_at = ?, lease_owner = NULL,"
                    " lease_expires_at = NULL WHERE entry_id = ?"
                ),
                [(now, entry_id) for entry_id in sorted(set(entry_ids))],
            )

    def retry_outbox(self, entry_ids: Sequence[int], *, retry_at: float) -> None:
        if not entry_ids:
            return
        with self.transaction() as cur:
            cur.executemany(
                self.q(
                    "UPDATE outbox SET lease_owner = NULL, lease_expires_at = ?"
                    " WHERE entry_id = ? AND forwarded_at IS NULL"
                ),
                [(retry_at, entry_id) for entry_id in sorted(set(entry_ids))],
            )

    def outbox_waiting(self, trace_id: str, span_id: str, *, now: float) -> bool:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT 1 FROM outbox WHERE trace_id = ? AND span_id = ?"
                    " AND forwarded_at IS NULL"
                    " AND (lease_owner IS NULL OR lease_expires_at <= ?)"
                ),
                (trace_id, span_id, now),
            )
            return cur.fetchone() is not None

    # ---------------------------------------------------------------- admin
    def stats(self, *, now: float) -> StoreStats:
        out = StoreStats()
        with self.transaction(write=False) as cur:
            counts: dict[str, int] = {}
            for state in (PENDING, LEASED, DONE, FAILED):
                cur.execute(self.q("SELECT COUNT(*) FROM jobs WHERE state = ?"), (state,))
                counts[state] = int(cur.fetchone()[0])
            out.pending, out.leased = counts[PENDING], counts[LEASED]
            out.done, out.failed = counts[DONE], counts[FAILED]
            cur.execute(f"SELECT MIN(created_at) FROM jobs WHERE {_OPEN}")
            oldest = cur.fetchone()[0]
            out.oldest_pending_age_seconds = max(0.0, now - oldest) if oldest is not None else 0.0
            cur.execute("SELECT COUNT(*) FROM traces WHERE planned_at IS NULL")
            out.unplanned_traces = int(cur.fetchone()[0])
            cur.execute("SELECT COUNT(*) FROM conversations WHERE planned_at IS NULL")
            out.unplanned_conversations = int(cur.fetchone()[0])
            cur.execute(
                self.q(
                    "SELECT COALESCE(SUM(CASE WHEN release_at > ? THEN 1 ELSE 0 END), 0),"
                    " COALESCE(SUM(CASE WHEN release_at <= ? THEN 1 ELSE 0 END), 0)"
                    " FROM outbox WHERE forwarded_at IS NULL"
                ),
                (now, now),
            )
            held, due = cur.fetchone()
            out.outbox_held, out.outbox_due = int(held), int(due)
        return out


def _wall() -> float:
    return time.time()
