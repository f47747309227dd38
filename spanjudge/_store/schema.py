"""The schema: every table and index, as an append-only list of migrations, and their runner.

An existing database catches up at start-up: each version not applied yet runs once, inside the
opening transaction, and is recorded in ``schema_version``.

Example::

    with store.transaction() as cur:
        apply_migrations(cur, MIGRATIONS, types=store.types, q=store.q)
        assert current_version(cur) == SCHEMA_VERSION
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from spanjudge._store.models import LEASED, PENDING
from spanjudge._store.partitioned_schema import PARTITION_BY_DAY, SPAN_COLUMNS
from spanjudge._store.sql_base import Cursor, wall

# Tokens filled per dialect: {id_pk} an auto-increment key, {real} a double, {bigint} 64 bits,
# {blob} bytes.
# Migrations are append-only: version N is MIGRATIONS[N - 1]; a release that changes the schema
# adds a list of statements, and every database catches up at start-up.
# The columns a result row has, in results and in superseded_results (a result moved there when
# its target is evaluated again keeps them all): spelt once.
_RESULT_COLUMNS = """            rule TEXT NOT NULL,
            metric TEXT NOT NULL,
            target_type TEXT NOT NULL,
            target_id TEXT NOT NULL,
            trace_id TEXT,
            status TEXT NOT NULL,
            cost {real},
            created_at {real} NOT NULL,
            emitted_at {real},
"""

MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE IF NOT EXISTS spans (\n"
        + SPAN_COLUMNS
        + "            PRIMARY KEY (trace_id, span_id))",
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
        "CREATE TABLE IF NOT EXISTS results (\n"
        "            job_id {bigint} PRIMARY KEY,\n"
        + _RESULT_COLUMNS
        + "            record TEXT NOT NULL,\n"
        "            UNIQUE (rule, target_type, target_id))",
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
        "CREATE INDEX IF NOT EXISTS outbox_due ON outbox (release_at) WHERE forwarded_at IS NULL",
        "CREATE INDEX IF NOT EXISTS outbox_forwarded ON outbox (forwarded_at)"
        " WHERE forwarded_at IS NOT NULL",
        # release_held() looks up the open jobs of one span
        "CREATE INDEX IF NOT EXISTS jobs_span ON jobs (trace_id, span_id)",
    ],
    [
        # Each output is delivered and confirmed on its own: emitted_at now marks the "span"
        # output, event_emitted_at the "event" output (the gen_ai.evaluation.result log
        # record). Results emitted before this version count as delivered for both: the event
        # output did not exist then, and replaying history into a logs backend is a flood.
        "ALTER TABLE results ADD COLUMN event_emitted_at {real}",
        "UPDATE results SET event_emitted_at = emitted_at WHERE emitted_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS results_event_unemitted ON results (job_id)"
        " WHERE event_emitted_at IS NULL",
    ],
    [
        # GenAI content events that arrived as log records (event content modes), joined to
        # their span by (trace_id, span_id) when the trace is read. OTLP log records carry no
        # id of their own: event_key, a digest of the whole event, makes a client's retry of a
        # stored batch a no-op. The unique index leads with trace_id, so it serves reads too.
        """CREATE TABLE IF NOT EXISTS log_events (
            event_id {id_pk},
            trace_id TEXT NOT NULL,
            span_id TEXT,
            event_name TEXT NOT NULL,
            time_ns {bigint} NOT NULL,
            attributes TEXT NOT NULL,
            body TEXT NOT NULL,
            resource TEXT NOT NULL,
            scope_name TEXT,
            arrived_at {real} NOT NULL,
            event_key TEXT NOT NULL)""",
        "CREATE UNIQUE INDEX IF NOT EXISTS log_events_trace ON log_events (trace_id, event_key)",
        "CREATE INDEX IF NOT EXISTS log_events_arrived ON log_events (arrived_at)",
    ],
    [
        # Human feedback on an evaluated (or not yet evaluated) target: matched to results by
        # (metric, trace_id, span_id) or (metric, conversation_id) when read, so a label that
        # arrives before its evaluation is kept and joins it later. emitted_at marks the log
        # event that puts the label into the trace beside the judge's verdict.
        """CREATE TABLE IF NOT EXISTS feedback (
            feedback_id {id_pk},
            metric TEXT NOT NULL,
            rule TEXT,
            trace_id TEXT,
            span_id TEXT,
            conversation_id TEXT,
            label TEXT NOT NULL,
            score {real},
            note TEXT,
            annotator TEXT,
            source TEXT NOT NULL,
            created_at {real} NOT NULL,
            emitted_at {real})""",
        "CREATE INDEX IF NOT EXISTS feedback_trace ON feedback (trace_id, span_id)",
        "CREATE INDEX IF NOT EXISTS feedback_conversation ON feedback (conversation_id)"
        " WHERE conversation_id IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS feedback_created ON feedback (metric, created_at)",
        "CREATE INDEX IF NOT EXISTS feedback_unemitted ON feedback (feedback_id)"
        " WHERE emitted_at IS NULL",
    ],
    [
        # The judge-result cache: one outcome per cache key (a digest of the metric, its
        # parameters and prompt version, the judge model and the rebuilt case), reused within a
        # configured age. record is the stored EvaluationRecord's JSON.
        """CREATE TABLE IF NOT EXISTS judge_cache (
            cache_key TEXT PRIMARY KEY,
            metric TEXT NOT NULL,
            judge_model TEXT NOT NULL,
            record TEXT NOT NULL,
            created_at {real} NOT NULL,
            hits INTEGER NOT NULL DEFAULT 0)""",
        "CREATE INDEX IF NOT EXISTS judge_cache_created ON judge_cache (created_at)",
    ],
    [
        # Enrich mode forwards spans as they arrived: payload is a held span's protobuf bytes
        # (envelope: its resource and scope, see spanjudge/_core/otlp_wire.py), or for an entry of
        # pass-through spans (span_id 'batch:...', no envelope) their OTLP request body,
        # compressed (zlib then, Zstandard since: spanjudge/_store/packing.py reads both).
        # Entries without payload (written before this version) are rebuilt from the spans.
        "ALTER TABLE outbox ADD COLUMN payload {blob}",
        "ALTER TABLE outbox ADD COLUMN envelope {blob}",
        "ALTER TABLE outbox ADD COLUMN spans INTEGER NOT NULL DEFAULT 1",
    ],
    [
        # A held span's bytes live in the shared entry of its write, beside the pass-through
        # spans' (one compressed payload, one resource and scope per group instead of one per
        # held span): the held row points into it (shared_id: that entry; piece: where
        # split_request lists the span in the held part). split: the length of a shared
        # entry's pass-through request at the start of its decompressed payload. A shared entry
        # is kept past retention while a held row pointing into it is not forwarded.
        # No unique (trace_id, span_id) any more: the spans insert already tells which spans a
        # write stored first (those get entries), and that index took a random page per held
        # row. A held row is found from its span by arrival (arrived_at = the span's), an
        # index that only grows at its end.
        # Version 7 rows carry over (new entry ids, in the same order): held rows with their
        # own payload and envelope, shared entries without split (all of the payload is the
        # request).
        "CREATE TABLE outbox_v7 AS SELECT * FROM outbox",
        "DROP TABLE outbox",
        """CREATE TABLE outbox (
            entry_id {id_pk},
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            hold INTEGER NOT NULL,
            release_at {real} NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_expires_at {real},
            forwarded_at {real},
            payload {blob},
            envelope {blob},
            spans INTEGER NOT NULL DEFAULT 1,
            arrived_at {real},
            shared_id {bigint},
            piece INTEGER,
            split INTEGER)""",
        "INSERT INTO outbox (trace_id, span_id, hold, release_at, attempts, lease_owner,"
        " lease_expires_at, forwarded_at, payload, envelope, spans, arrived_at)"
        " SELECT o.trace_id, o.span_id, o.hold, o.release_at, o.attempts, o.lease_owner,"
        " o.lease_expires_at, o.forwarded_at, o.payload, o.envelope, o.spans,"
        " (SELECT s.arrived_at FROM spans s WHERE s.trace_id = o.trace_id"
        " AND s.span_id = o.span_id) FROM outbox_v7 o ORDER BY o.entry_id",
        "DROP TABLE outbox_v7",
        "CREATE INDEX IF NOT EXISTS outbox_due ON outbox (release_at) WHERE forwarded_at IS NULL",
        "CREATE INDEX IF NOT EXISTS outbox_forwarded ON outbox (forwarded_at)"
        " WHERE forwarded_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS outbox_held ON outbox (arrived_at) WHERE hold = 1",
    ],
    [
        # A target evaluated again (an errored result redone by `backfill --retry-errors`, a
        # conversation judged again after a new turn) keeps exactly one current row in results;
        # the row it replaced moves here with when and why, so nothing judged is ever lost.
        "CREATE TABLE IF NOT EXISTS superseded_results (\n"
        "            superseded_id {id_pk},\n"
        "            job_id {bigint} NOT NULL,\n"
        + _RESULT_COLUMNS
        + """            event_emitted_at {real},
            record TEXT NOT NULL,
            superseded_at {real} NOT NULL,
            reason TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS superseded_results_job ON superseded_results (job_id)",
        # daily budgets count what superseded results cost too
        "CREATE INDEX IF NOT EXISTS superseded_results_rule ON superseded_results"
        " (rule, created_at)",
        # Traces that got spans after they were planned, with when the first came: the trace
        # settles and is planned again for the spans that arrived since (new targets get jobs;
        # planned ones keep theirs), and the row goes.
        """CREATE TABLE IF NOT EXISTS late_traces (
            trace_id TEXT PRIMARY KEY,
            since {real} NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS late_traces_since ON late_traces (since)",
    ],
    [
        # What summaries and comparisons add up (issue 29), as columns so a window of a million
        # results is summed in SQL without parsing one record: segments (the result's segment
        # values as compact JSON, spanjudge/_store/summaries.py), the score, passed (1 pass,
        # 0 fail, NULL without a verdict) and weight (1 / the probability the target was
        # sampled with). Rows from before have weight NULL: summaries read their records.
        "ALTER TABLE results ADD COLUMN segments TEXT",
        "ALTER TABLE results ADD COLUMN score {real}",
        "ALTER TABLE results ADD COLUMN passed INTEGER",
        "ALTER TABLE results ADD COLUMN weight {real}",
    ],
    [
        # Summaries read a window of results through this index alone (PostgreSQL: an index-only
        # scan, no record read): 1,000,000 results summed by service.version in 1.1 s instead
        # of 1.9 s on two cores (benchmarks/summaries.py). The partial index finds the rows
        # from before version 10 (summed from their records) without scanning the table.
        "CREATE INDEX IF NOT EXISTS results_summary ON results"
        " (created_at, rule, metric, segments, status, passed, score, weight)",
        "CREATE INDEX IF NOT EXISTS results_unweighted ON results (created_at)"
        " WHERE weight IS NULL",
    ],
    # spans and outbox partitioned by day on PostgreSQL (the statements and why: their module)
    PARTITION_BY_DAY,
    [
        # Spans held for their conversation (spanjudge/_store/holds.py): written before the
        # receiver answers, moved into spans or dropped when their trace is decided. A plain
        # table on both backends: rows come and go within minutes, and it is bounded.
        "CREATE TABLE IF NOT EXISTS held_spans (\n"
        + SPAN_COLUMNS
        + "            size {bigint} NOT NULL,\n"
        "            PRIMARY KEY (trace_id, span_id))",
        "CREATE INDEX IF NOT EXISTS held_spans_arrived ON held_spans (arrived_at)",
    ],
    [
        # Busy traces (a span every second never goes quiet for settle_seconds) are planned
        # once their first unplanned span waited max_settle_delay_seconds: found by first
        # arrival among the unplanned ones (spanjudge/_store/spans.py, busy_traces).
        "CREATE INDEX IF NOT EXISTS traces_unplanned_first ON traces (first_arrival)"
        " WHERE planned_at IS NULL",
    ],
]


SCHEMA_VERSION = len(MIGRATIONS)

# Open jobs: the predicate of the jobs_open index above, so claims and counts can use it.
OPEN_JOBS = f"state IN ('{PENDING}', '{LEASED}')"


def current_version(cur: Cursor) -> int:
    """The last migration applied (0 on an empty database with the version table)."""
    cur.execute("SELECT MAX(version) FROM schema_version")
    return int(cur.fetchone()[0] or 0)


def apply_migrations(
    cur: Cursor,
    migrations: Sequence[Sequence[str]],
    *,
    types: Mapping[str, str],
    q: Callable[[str], str],
    dialect: str = "sqlite",
) -> None:
    """Run the versions of ``migrations`` the database lacks, inside the caller's write
    transaction (``types``: the dialect's schema tokens; ``q``: its placeholder rewriter;
    ``dialect``: which :class:`OnPostgres`-like statements apply)."""
    cur.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        f"version INTEGER NOT NULL, applied_at {types['real']} NOT NULL)"
    )
    for version in range(current_version(cur) + 1, len(migrations) + 1):
        for statement in migrations[version - 1]:
            if getattr(statement, "dialect", dialect) == dialect:
                cur.execute(statement.format(**types))
        cur.execute(
            q("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)"),
            (version, wall()),
        )
