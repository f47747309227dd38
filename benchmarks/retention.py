"""Retention cost on PostgreSQL: deleting expired span rows vs dropping a day's partition.

For each size, a fresh store schema is filled on the server (``generate_series``, no client
round trips) with N spans whose start times spread evenly over ten UTC days, each arrived when
it started, and one forwarded outbox entry per ten spans. Then retention removes one day (a
tenth of the store) twice:

- ``partitions``: ``PostgresStore.delete_older_than`` (retention's one path there) at the end of
  day 1: the day's spans and outbox partitions are dropped whole.
- ``rows``: the row-by-row retention every store ran before partitions (``DELETE ... WHERE
  arrived_at < cutoff`` on spans and outbox, the code path SQLite still runs) at the end of day
  2, then ``VACUUM`` of that day's partitions, the work a row delete leaves behind.

Each pass reports wall seconds, spans removed, the bytes of spans + outbox before and after,
WAL bytes written (``pg_current_wal_lsn`` before and after: the server may be shared, so other
writers count too) and the CPU seconds of the store connection's server process
(``/proc/<backend pid>/stat``). Beside the drop, the seconds the filesystem takes to free as
many bytes from a plain file: the part of a drop's time no database setting changes. The
goal: a partition drop costs the same at 10,000,000 spans as at 100,000. Prints JSON.

    python benchmarks/retention.py [--sizes 100000,10000000] [--postgres-url URL]
    python benchmarks/retention.py --smoke      # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from spanjudge._store.partitions import DAY_NS, DAY_SECONDS, Partitions, arrival_day
from spanjudge._store.postgres import PostgresStore
from spanjudge._store.spans import SpanQueries
from spanjudge.errors import StoreError

ROOT = Path(__file__).resolve().parents[1]
DAYS = 10
DAY0 = 1_699_920_000  # 2023-11-14 00:00 UTC, the first day of start times
FILL_CHUNK = 1_000_000
# a GenAI-shaped attribute set (about 150 bytes), the same text in every row
ATTRIBUTES = json.dumps(
    {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 412,
        "gen_ai.usage.output_tokens": 96,
        "gen_ai.response.finish_reasons": ["stop"],
    }
)


def machine() -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "commit": commit,
        "load_average_1m": round(os.getloadavg()[0], 2),  # the machine may be shared
    }


def fill(store: PostgresStore, spans: int) -> float:
    """``spans`` spans over ``DAYS`` days of start times, and their outbox entries; seconds."""
    first = arrival_day(DAY0)
    days = set(range(first, first + DAYS))
    parts = Partitions(store.transaction)
    parts.detect()
    parts.ensure({"spans": days, "outbox": days})
    step_ns = DAYS * DAY_NS // spans  # start times in order of the row number
    began = time.perf_counter()
    for low in range(0, spans, FILL_CHUNK):
        high = min(spans, low + FILL_CHUNK) - 1
        with store.transaction() as cur:
            cur.execute(
                "INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind, start_ns,"
                " end_ns, status_code, attributes, resource, events, scope_name, service_name,"
                " arrived_at) SELECT lpad(to_hex(g / 10), 32, '0'), lpad(to_hex(g), 16, '0'),"
                " CASE WHEN mod(g, 10) = 0 THEN NULL"
                " ELSE lpad(to_hex(g - mod(g, 10)), 16, '0') END,"
                " 'chat gpt-4o-mini', 'CLIENT', %s::bigint + g * %s::bigint,"
                " %s::bigint + g * %s::bigint + 1500000000, 'UNSET', %s,"
                " '{\"service.name\": \"bench\"}', '[]', 'bench', 'bench',"
                " (%s::bigint + g * %s::bigint) / 1e9 FROM generate_series(%s::bigint, %s) g",
                (*(DAY0 * 10**9, step_ns) * 2, ATTRIBUTES, DAY0 * 10**9, step_ns, low, high),
            )
            # one forwarded entry of a shared request per ten spans, arrived with them
            cur.execute(
                "INSERT INTO outbox (trace_id, span_id, hold, release_at, forwarded_at, payload,"
                " spans, arrived_at) SELECT '', 'batch:' || g, 0, t, t, decode(repeat('ab', 600),"
                " 'hex'), 10, t FROM (SELECT g, (%s::bigint + g * 10 * %s::bigint) / 1e9 AS t"
                " FROM generate_series(%s::bigint, %s) g) s",
                (DAY0 * 10**9, step_ns, low // 10, (high + 1) // 10 - 1),
            )
    with store.transaction() as cur:
        cur.execute("ANALYZE spans")
        cur.execute("ANALYZE outbox")
    return time.perf_counter() - began


def _bytes(cur: Any) -> int:
    cur.execute(
        "SELECT COALESCE(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('spans')"
        " UNION ALL SELECT COALESCE(sum(pg_total_relation_size(relid)), 0)"
        " FROM pg_partition_tree('outbox')"
    )
    return sum(int(row[0]) for row in cur.fetchall())


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # the server runs elsewhere
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Probe:
    """The server-side counters around one pass, read through the store's one connection."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        with store.transaction() as cur:
            cur.execute("SELECT pg_backend_pid()")
            self.pid = int(cur.fetchone()[0])

    def read(self) -> tuple[float, int, int, float | None]:
        with self.store.transaction() as cur:
            cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
            wal = int(cur.fetchone()[0])
            size = _bytes(cur)
        return time.perf_counter(), wal, size, _cpu_seconds(self.pid)

    def checkpoint(self) -> None:
        """Start each pass from a checkpoint, so both pay the full-page writes a first change
        to a page after one costs (needs a superuser or pg_checkpoint; skipped otherwise)."""
        with contextlib.suppress(StoreError), self.store.transaction() as cur:
            cur.execute("CHECKPOINT")

    def measure(self, run: Any) -> dict[str, Any]:
        self.checkpoint()
        load = round(os.getloadavg()[0], 2)
        _, wal0, size0, cpu0 = self.read()
        t0 = time.perf_counter()
        removed = run()
        t1, wal1, size1, cpu1 = self.read()
        return {
            "load_average_1m": load,  # other jobs on the machine slow every figure
            "seconds": round(t1 - t0, 4),
            "spans_removed": removed,
            "bytes_before": size0,
            "bytes_after": size1,
            "wal_bytes": wal1 - wal0,
            "server_cpu_seconds": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 3),
        }


def vacuum(url: str, schema: str, day: int) -> None:
    """VACUUM one day's partitions (outside a transaction, on a connection of its own)."""
    import psycopg
    from psycopg import sql

    from spanjudge._store.partitions import partition_name

    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("spans", "outbox"):
            name = sql.Identifier(schema, partition_name(table, day))
            conn.execute(sql.SQL("VACUUM {}").format(name))


def free_file_seconds(size: int) -> float:
    """Seconds to free ``size`` bytes of a file in a temporary directory (fsynced, then
    truncated): what the filesystem alone charges for the space a drop gives back. A
    partition's files are freed the same way when its drop commits; on a filesystem mounted with
    ``discard`` that cost grows with the bytes, whatever the database does."""
    with tempfile.NamedTemporaryFile() as f:
        block = b"\0" * (1 << 20)
        for _ in range(size >> 20):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
        began = time.perf_counter()
        os.truncate(f.name, 0)
        return round(time.perf_counter() - began, 4)


def run_size(url: str, spans: int) -> dict[str, Any]:
    schema = f"spanjudge_retention_{uuid.uuid4().hex[:8]}"
    dropping = PostgresStore(url, schema=schema, min_size=1, max_size=1)
    try:
        out: dict[str, Any] = {"spans": spans, "days": DAYS}
        out["fill_seconds"] = round(fill(dropping, spans), 2)
        probe = Probe(dropping)
        out["partitions"] = probe.measure(lambda: dropping.delete_older_than(DAY0 + DAY_SECONDS))
        freed = out["partitions"]["bytes_before"] - out["partitions"]["bytes_after"]
        out["partitions"]["same_bytes_freed_from_a_file_seconds"] = free_file_seconds(freed)

        # the same store's row retention, as before partitions (the spans' and outbox rows of
        # day 2 deleted one by one; no partition dropped)
        def delete_rows() -> int:
            dropping.delete_rows = True
            try:
                return SpanQueries.delete_older_than(dropping, DAY0 + 2 * DAY_SECONDS)
            finally:
                dropping.delete_rows = False

        out["rows"] = probe.measure(delete_rows)
        day2 = arrival_day(DAY0 + DAY_SECONDS)
        out["rows"]["vacuum_after"] = probe.measure(lambda: vacuum(url, schema, day2))
        return out
    finally:
        dropping.drop_schema()
        dropping.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,10000000")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "SPANJUDGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--smoke", action="store_true", help="seconds: 2,000 and 20,000 spans")
    args = parser.parse_args()
    sizes = [2_000, 20_000] if args.smoke else [int(s) for s in args.sizes.split(",")]
    runs = [run_size(args.postgres_url, n) for n in sizes]
    small, large = runs[0], runs[-1]
    out = {
        "benchmark": "retention",
        "machine": machine(),
        "runs": runs,
        # the goal: dropping a day costs the same however big the store (ratio near 1), where
        # deleting its rows grows with them
        "drop_seconds_large_over_small": round(
            large["partitions"]["seconds"] / max(small["partitions"]["seconds"], 1e-6), 2
        ),
        "delete_seconds_large_over_small": round(
            large["rows"]["seconds"] / max(small["rows"]["seconds"], 1e-6), 2
        ),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
