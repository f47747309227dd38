"""Schema version 12, PostgreSQL only: the ``spans`` and ``outbox`` tables partitioned by UTC day.

Retention can then drop a whole day instead of deleting its rows one by one
(:mod:`~spanjudge._store.partitions` makes and drops the partitions; docs/store.md says
why these keys). SQLite, one embedded file, keeps its tables: a DELETE there frees pages for
reuse in the same file, and nothing else shares it.

Example::

    apply_migrations(cur, [*MIGRATIONS[:11], PARTITION_BY_DAY], types=t, q=q, dialect="postgresql")
"""

from __future__ import annotations


class OnPostgres(str):
    """A migration statement only PostgreSQL runs; elsewhere the version is recorded without it."""

    dialect = "postgresql"


# The spans table's columns, as version 1 made them and version 12 makes them again
# partitioned (schema.py's tokens: {bigint}, {real}): spelt once.
SPAN_COLUMNS = """            trace_id TEXT NOT NULL,
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
"""

_DAY_NS = 86_400_000_000_000
_SPAN_COLUMNS = (
    "trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code,"
    " status_message, attributes, resource, events, scope_name, service_name, conversation_id,"
    " arrived_at"
)
_OUTBOX_COLUMNS = (
    "entry_id, trace_id, span_id, hold, release_at, attempts, lease_owner, lease_expires_at,"
    " forwarded_at, payload, envelope, spans, shared_id, piece, split"
)


def _day_partitions(table: str, day: str, scale: int) -> OnPostgres:
    """A block that creates the day partitions (spanjudge/_store/partitions.py names them) of
    ``table`` for the days ``day`` (an expression over ``{table}_v11``) takes in the last month
    (and tomorrow); rows of other days go to the default partition, a store's odd start times
    making no table each."""
    return OnPostgres(
        "DO $$ DECLARE d bigint; BEGIN"
        f" FOR d IN SELECT DISTINCT x.d FROM (SELECT {day} AS d FROM {table}_v11) x"
        " WHERE x.d BETWEEN floor(extract(epoch FROM now()) / 86400) - 31"
        " AND floor(extract(epoch FROM now()) / 86400) + 1 LOOP"
        " EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF"
        f" {table} FOR VALUES FROM (%s) TO (%s)', '{table}_p'"
        " || to_char(to_timestamp(d * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'),"
        f" d * {scale}, (d + 1) * {scale}); END LOOP; END $$"
    )


# Version 12 (PostgreSQL only; SQLite, one embedded file, keeps its tables: a DELETE there
# frees pages for reuse in the same file, and nothing else shares it). spans and outbox become
# tables partitioned by UTC day, so retention can drop a whole day instead of deleting its rows
# one by one (spanjudge/_store/partitions.py; docs/store.md says why these keys):
# - spans by the span's own start time: a span delivered again, at any later time, routes to
#   the partition it was stored in, and the key, which must include the partition column,
#   becomes (trace_id, span_id, start_ns): the same span still conflicts with itself.
# - outbox by the arrival of the write that made the entry (a shared entry and the held rows
#   pointing into it were written together); entries from before version 8 without an arrival
#   take their release time. Entry ids carry over and the id sequence continues after them.
PARTITION_BY_DAY: list[str] = [
    OnPostgres("ALTER TABLE spans RENAME TO spans_v11"),
    OnPostgres("ALTER TABLE spans_v11 DROP CONSTRAINT IF EXISTS spans_pkey"),
    OnPostgres("DROP INDEX IF EXISTS spans_conversation"),
    OnPostgres("DROP INDEX IF EXISTS spans_arrived"),
    OnPostgres(
        "CREATE TABLE spans (\n"
        + SPAN_COLUMNS
        + "            PRIMARY KEY (trace_id, span_id, start_ns)) PARTITION BY RANGE (start_ns)"
    ),
    # rows of days without a partition of their own (spanjudge/_store/partitions.py)
    OnPostgres("CREATE TABLE spans_default PARTITION OF spans DEFAULT"),
    _day_partitions(
        "spans",
        f"(start_ns - mod(mod(start_ns, {_DAY_NS}) + {_DAY_NS}, {_DAY_NS})) / {_DAY_NS}",
        _DAY_NS,
    ),
    OnPostgres(f"INSERT INTO spans ({_SPAN_COLUMNS}) SELECT {_SPAN_COLUMNS} FROM spans_v11"),
    OnPostgres("DROP TABLE spans_v11"),
    OnPostgres(
        "CREATE INDEX spans_conversation ON spans (conversation_id)"
        " WHERE conversation_id IS NOT NULL"
    ),
    OnPostgres("CREATE INDEX spans_arrived ON spans (arrived_at)"),
    OnPostgres("ALTER TABLE outbox RENAME TO outbox_v11"),
    OnPostgres("ALTER TABLE outbox_v11 DROP CONSTRAINT IF EXISTS outbox_pkey"),
    OnPostgres("ALTER TABLE outbox_v11 ALTER COLUMN entry_id DROP IDENTITY IF EXISTS"),
    OnPostgres("UPDATE outbox_v11 SET arrived_at = release_at WHERE arrived_at IS NULL"),
    OnPostgres("DROP INDEX IF EXISTS outbox_due"),
    OnPostgres("DROP INDEX IF EXISTS outbox_forwarded"),
    OnPostgres("DROP INDEX IF EXISTS outbox_held"),
    OnPostgres(
        """CREATE TABLE outbox (
            entry_id BIGINT GENERATED BY DEFAULT AS IDENTITY,
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            hold INTEGER NOT NULL,
            release_at DOUBLE PRECISION NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_expires_at DOUBLE PRECISION,
            forwarded_at DOUBLE PRECISION,
            payload BYTEA,
            envelope BYTEA,
            spans INTEGER NOT NULL DEFAULT 1,
            arrived_at DOUBLE PRECISION NOT NULL,
            shared_id BIGINT,
            piece INTEGER,
            split INTEGER,
            PRIMARY KEY (entry_id, arrived_at)) PARTITION BY RANGE (arrived_at)"""
    ),
    OnPostgres("CREATE TABLE outbox_default PARTITION OF outbox DEFAULT"),
    # the day of an arrival, one less where the division rounded up to the next day
    _day_partitions(
        "outbox",
        "CASE WHEN floor(arrived_at / 86400) * 86400 > arrived_at"
        " THEN floor(arrived_at / 86400) - 1 ELSE floor(arrived_at / 86400) END",
        86_400,
    ),
    OnPostgres(
        f"INSERT INTO outbox ({_OUTBOX_COLUMNS}, arrived_at) SELECT {_OUTBOX_COLUMNS},"
        " arrived_at FROM outbox_v11 ORDER BY entry_id"
    ),
    OnPostgres(
        "SELECT setval(pg_get_serial_sequence('outbox', 'entry_id'),"
        " COALESCE(MAX(entry_id), 0) + 1, false) FROM outbox"
    ),
    OnPostgres("DROP TABLE outbox_v11"),
    OnPostgres("CREATE INDEX outbox_due ON outbox (release_at) WHERE forwarded_at IS NULL"),
    OnPostgres(
        "CREATE INDEX outbox_forwarded ON outbox (forwarded_at) WHERE forwarded_at IS NOT NULL"
    ),
    OnPostgres("CREATE INDEX outbox_held ON outbox (arrived_at) WHERE hold = 1"),
]
