"""How long ``scores --summary`` and ``compare`` take on a PostgreSQL store of many results.

A fresh schema gets ``--results`` results (default 1,000,000) written in SQL with
``generate_series``, shaped as the loop stores them: 4 rules, 6 service versions (the newest,
1.5.0, with a planted drop in pass rate), 3 models, sample rates 1, 0.25 and 0.05, a record of
about 900 bytes each. Then it times, median of ``--repeat`` runs: the store's grouped sums
(``summary_sums``) unsplit and by each key, the estimates on top, the comparison, and both
commands end to end in a fresh process (``spanjudge scores --summary --by service.version`` and
``spanjudge compare --by service.version 1.4.0 1.5.0``, interpreter start included). Prints
JSON; the schema is dropped afterwards. The fill is followed by ``VACUUM ANALYZE`` (what autovacuum
does soon after a bulk load), so the summaries' index-only scan is measured as it runs in a
steady store.

    python benchmarks/summaries.py [--results 1000000] [--postgres-url URL]
    python benchmarks/summaries.py --smoke    # 2,000 results; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spanjudge._store.postgres import PostgresStore
from spanjudge.evaluators._review.estimates import fold_segments, summarize
from spanjudge.evaluators._review.regressions import compare_segments

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
VERSIONS = ("1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0")
PASS_RATE = {"1.5.0": 0.80}  # the planted regression; every other version passes 0.90
RECORD_PADDING = "x" * 700  # verdicts and reason: a stored record is about 900 bytes

FILL_SQL = """
INSERT INTO results (job_id, rule, metric, target_type, target_id, trace_id, status, cost,
                     created_at, record, segments, score, passed, weight)
SELECT g, 'rule-' || mod(g, 4), 'metric-' || mod(g, 4), 'llm', lpad(to_hex(g), 16, '0'),
       lpad(to_hex(g), 32, '0'), status, 0.0001, %(now)s - mod(g, 86400),
       '{"rule":"rule-' || mod(g, 4) || '","padding":"' || %(padding)s || '"}',
       '{"model":"model-' || mod(g, 3) || '","service":"shop","service.version":"' || version
         || '"}',
       CASE WHEN status = 'scored' THEN score END,
       CASE WHEN status = 'scored' THEN (score >= 0.5)::int END,
       (ARRAY[1.0, 4.0, 20.0])[1 + floor(u4 * 3)::int]
FROM (
  SELECT g, version, u4,
         CASE WHEN u < 0.03 THEN 'error' WHEN u < 0.05 THEN 'skipped' ELSE 'scored' END AS status,
         CASE WHEN u2 < (CASE WHEN version = %(bad)s THEN %(bad_rate)s ELSE 0.90 END)
              THEN 0.5 + u3 / 2 ELSE u3 / 2 END AS score
  FROM (
    SELECT g, random() AS u, random() AS u2, random() AS u3, random() AS u4,
           (%(versions)s::text[])[1 + floor(random() * %(n_versions)s)::int] AS version
    FROM generate_series(1, %(n)s) AS g
  ) drawn
) shaped
"""


def fill(store: PostgresStore, n: int, now: float) -> float:
    start = time.perf_counter()
    with store.transaction() as cur:
        cur.execute(
            FILL_SQL,
            {
                "n": n, "now": now, "padding": RECORD_PADDING, "versions": list(VERSIONS),
                "n_versions": len(VERSIONS), "bad": "1.5.0", "bad_rate": PASS_RATE["1.5.0"],
            },
        )  # fmt: skip
    return time.perf_counter() - start


def vacuum(url: str, schema: str) -> float:
    """VACUUM ANALYZE the results, as autovacuum soon would after a bulk load: the summaries'
    index-only scan reads the table only for pages not yet marked all-visible."""
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {schema}.results")  # the schema is ours: bench_numbers_*
    return time.perf_counter() - start


def median_seconds(call: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def cli_seconds(args: list[str], config: Path | None, repeat: int) -> float:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def run() -> None:
        done = subprocess.run(
            [sys.executable, "-m", "spanjudge.cli", *args,
             *(["--config", str(config)] if config else [])],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    return median_seconds(run, repeat)[0]


def bench(url: str, n: int, repeat: int) -> dict[str, Any]:
    schema = f"bench_numbers_{uuid.uuid4().hex[:8]}"
    store = PostgresStore(url, schema=schema, max_size=2)
    now = time.time()
    try:
        out: dict[str, Any] = {"results": n, "fill_seconds": round(fill(store, n, now), 2)}
        out["vacuum_seconds"] = round(vacuum(url, schema), 2)
        sums_seconds = {}
        for key in (None, "service.version", "model"):
            seconds, _ = median_seconds(lambda key=key: store.summary_sums(by=key), repeat)
            sums_seconds[key or "unsplit"] = round(seconds, 3)
        out["summary_sums_seconds"] = sums_seconds

        def summary() -> Any:
            kept, folded = fold_segments(store.summary_sums(by="service.version"), 20)
            return summarize(kept, by="service.version", folded=folded)

        seconds, rows = median_seconds(summary, repeat)
        out["summary_seconds"] = round(seconds, 3)
        out["summary_rows"] = len(rows)

        def compare() -> Any:
            sums = store.summary_sums(by="service.version")
            return compare_segments(sums, key="service.version", baseline="1.4.0",
                                    candidate="1.5.0")  # fmt: skip

        seconds, rows = median_seconds(compare, repeat)
        out["compare_seconds"] = round(seconds, 3)
        out["compare_decisions"] = sorted({row.pass_rate.decision for row in rows})
        out["compare_effect"] = round(rows[0].pass_rate.difference.value or 0.0, 4)
        with tempfile.TemporaryDirectory() as folder:
            config = Path(folder) / "worker.toml"
            config.write_text(f'store_url = "{url}"\nstore_schema = "{schema}"\n', "utf-8")
            out["cli_seconds"] = {
                "scores --summary --by service.version": round(cli_seconds(
                    ["scores", "--summary", "--by", "service.version"], config, repeat), 2),
                "compare --by service.version 1.4.0 1.5.0": round(cli_seconds(
                    ["compare", "--by", "service.version", "1.4.0", "1.5.0"], config, repeat), 2),
                "python start and import (spanjudge --help)": round(cli_seconds(
                    ["--help"], None, repeat), 2),
            }  # fmt: skip
        return out
    finally:
        store.drop_schema()
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--results", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SPANJUDGE_BENCH_PG")
        or os.environ.get("SPANJUDGE_TEST_POSTGRES_URL", DEFAULT_URL),
    )
    parser.add_argument("--smoke", action="store_true", help="2,000 results, one run each")
    args = parser.parse_args(argv)
    n, repeat = (2000, 1) if args.smoke else (args.results, args.repeat)
    doc = {
        "benchmark": "numbers",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "postgresql": bench(args.postgres_url, n, repeat),
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
