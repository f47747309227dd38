"""What one ``spanjudge worker`` costs per received span when its rules sample by trace
(issue 31): ingest at sample rates 100%, 10% and 1% in the same run, on SQLite and PostgreSQL.

Each run starts a real worker process (its evaluation loop parked: only ingest is measured)
whose one rule samples agent turns by trace at the run's rate (``sample_by = "trace"``), so the
worker stores only the spans of the traces the rule can pick (spanjudge/worker/keep_policy.py). A
separate load process posts OTLP/HTTP protobuf batches of demo agent traces (the real tracer's
spans, 60 turns a request), every trace with a fresh random trace id spliced into the same
encoded body, over keep-alive connections, as fast as the worker answers.

Per run: spans/s accepted; the worker's CPU per received span; the PostgreSQL CPU per received
span (the backends serving the worker's own connections, found from its sockets; and the
server's WAL writer, checkpointer and background writer, which serve every database on the
machine); rows and bytes the store holds per received span after the run (spans + traces
rows; SQLite: database + WAL file, PostgreSQL: the tables' total relation size). The model fits
``cost(p) = per_received + p * per_stored`` to the three rates by least squares and answers how
many worker cores and database cores 100,000 spans/s at 2% sampling need.

    python benchmarks/ingest.py [--seconds 15] [--rounds 1] [--threads 4] [--stores sqlite,postgres]
    python benchmarks/ingest.py --smoke      # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker import PG_URL, ROOT, Worker, demo_turns_request, span_count

RATES = (1.0, 0.1, 0.01)
GOAL = (
    "spans/s at 1% >= 5x spans/s at 100%, same evaluations (tests/worker/test_ingest_sampling.py)"
)
MODEL_RATE = 0.02
MODEL_SPANS_PER_SECOND = 100_000
TICK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------- load process
def splice_plan(body: bytes, trace_ids: list[bytes]) -> tuple[list[bytes], list[int]]:
    """The encoded body cut around every occurrence of its trace ids: (the pieces between
    them, which trace each gap holds), so a new body is one join with fresh ids."""
    spots = []
    for index, trace_id in enumerate(trace_ids):
        at = body.find(trace_id)
        while at >= 0:
            spots.append((at, index))
            at = body.find(trace_id, at + len(trace_id))
    spots.sort()
    pieces, which, start = [], [], 0
    for at, index in spots:
        pieces.append(body[start:at])
        which.append(index)
        start = at + 16
    pieces.append(body[start:])
    return pieces, which


def run_load(url: str, seconds: float, threads: int, turns: int) -> None:
    """Entry of the load process: post fresh-id copies of one request for ``seconds``."""
    request = demo_turns_request(turns)
    per_request = span_count(request)
    trace_ids = sorted(
        {s.trace_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    )
    pieces, which = splice_plan(request.SerializeToString(), trace_ids)
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    counts = {"spans": 0, "requests": 0, "refused": 0}
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def post_loop() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {"Content-Type": "application/x-protobuf"}
        while time.perf_counter() < stop:
            fresh = [os.urandom(16) for _ in trace_ids]
            parts = [pieces[0]]
            for index, piece in zip(which, pieces[1:], strict=True):
                parts.append(fresh[index])
                parts.append(piece)
            conn.request("POST", "/v1/traces", body=b"".join(parts), headers=headers)
            answer = conn.getresponse()
            answer.read()
            with lock:
                counts["requests"] += 1
                if answer.status == 200:
                    counts["spans"] += per_request
                else:
                    counts["refused"] += 1
        conn.close()

    started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    pool = [threading.Thread(target=post_loop) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    used = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
    print(
        json.dumps(
            {
                **counts,
                "seconds": elapsed,
                "spans_per_request": per_request,
                "load_cpu_us_per_span": round(used * 1e6 / max(counts["spans"], 1), 2),
            }
        )
    )


# ------------------------------------------------------------------------- PostgreSQL CPU
def _cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def backends_of(pid: int) -> set[int]:
    """The PostgreSQL backend pids serving process ``pid``'s connections: its socket inodes,
    their local ports in /proc/net/tcp, those ports in pg_stat_activity."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            if cols[9] in inodes and remote_port == 5432:
                ports.append(int(cols[1].rsplit(":", 1)[1], 16))
    if not ports:
        return set()
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)", (ports,)
        ).fetchall()
    return {row[0] for row in rows}


def postgres_aux() -> list[int]:
    """The server's WAL writer, checkpointer and background writer."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        if re.match(r"postgres: .*(walwriter|checkpointer|background writer)", text):
            found.append(int(cmdline.parent.name))
    return found


# ------------------------------------------------------------------------- store figures
def store_figures(kind: str, target: str) -> dict[str, float]:
    """Rows in spans and traces, and the bytes the store holds."""
    if kind == "sqlite":
        with sqlite3.connect(target) as conn:
            spans = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
            traces = conn.execute("SELECT count(*) FROM traces").fetchone()[0]
        size = sum(
            os.path.getsize(target + suffix)
            for suffix in ("", "-wal")
            if os.path.exists(target + suffix)
        )
        return {"span_rows": spans, "trace_rows": traces, "bytes": size}
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        spans = conn.execute(f"SELECT count(*) FROM {target}.spans").fetchone()[0]
        traces = conn.execute(f"SELECT count(*) FROM {target}.traces").fetchone()[0]
        size = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
            (target,),
        ).fetchone()[0]
    return {"span_rows": spans, "trace_rows": traces, "bytes": int(size)}


# ------------------------------------------------------------------------- one run
def wait_ready(worker: Worker, timeout: float = 240.0) -> None:
    """Until /readyz answers 200 (a worker starting on a loaded machine can take a minute:
    worker.py's 30 s are not enough there); the log's tail when it died or never did."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.proc.poll() is None:
        try:
            if httpx.get(worker.url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    worker.log.flush()
    tail = Path(worker.log.name).read_text(errors="replace")[-2000:]
    raise RuntimeError(f"worker not ready (exit {worker.proc.poll()}):\n{tail}")


def one_run(kind: str, rate: float, args: Any, tmp: Path, judge: Any, n: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": judge.base_url, "api_key": "x"},
        "retention_seconds": None,
        "interval_seconds": 3600.0,  # the evaluation loop parked: ingest alone is measured
        "downstream_endpoint": "http://127.0.0.1:9/v1/traces",
        "rules": [
            {
                "metric": "bias",
                "target": "agent",
                "name": "bias",
                "sample_rate": rate,
                "sample_by": "trace",
            }
        ],
    }
    schema = None
    if kind == "sqlite":
        target = str(tmp / f"ingest-{n}.db")
        config["store_url"] = f"sqlite:///{target}"
    else:
        schema = target = f"sjingest_{uuid.uuid4().hex[:8]}"
        config.update(store_url=PG_URL, store_schema=schema)
    worker = Worker(config, tmp, f"ingest-{kind}-{n}")
    try:
        wait_ready(worker)
        before = store_figures(kind, target)
        backends = backends_of(worker.proc.pid) if schema else set()
        aux = postgres_aux() if schema else []
        pg_before = {pid: _cpu(pid) for pid in (*backends, *aux)}
        cpu_before = sum(worker.cpu_seconds())
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--load",
                worker.url + "/v1/traces",
                "--seconds",
                str(args.seconds),
                "--threads",
                str(args.threads),
                "--turns",
                str(args.turns),
            ],
            capture_output=True,
            check=True,
            cwd=ROOT,
        ).stdout
        run = json.loads(out)
        spans = max(run["spans"], 1)
        worker_cpu = sum(worker.cpu_seconds()) - cpu_before
        after = store_figures(kind, target)
        run.update(
            store=kind,
            rate=rate,
            spans_per_second=round(run["spans"] / run["seconds"]),
            worker_cpu_us_per_span=round(worker_cpu * 1e6 / spans, 2),
            stored_share=round((after["span_rows"] - before["span_rows"]) / spans, 4),
            rows_per_span=round(
                (
                    after["span_rows"]
                    + after["trace_rows"]
                    - before["span_rows"]
                    - before["trace_rows"]
                )
                / spans,
                4,
            ),
            bytes_per_span=round((after["bytes"] - before["bytes"]) / spans, 1),
            worker_rss_mb=round(worker.rss_mb(), 1),
        )
        if schema:
            now_backends = backends | backends_of(worker.proc.pid)
            used = sum(_cpu(pid) - pg_before.get(pid, 0.0) for pid in now_backends)
            aux_used = sum(_cpu(pid) - pg_before.get(pid, 0.0) for pid in aux)
            run["postgres_backend_cpu_us_per_span"] = round(used * 1e6 / spans, 2)
            run["postgres_aux_cpu_us_per_span"] = round(aux_used * 1e6 / spans, 2)
        return run
    finally:
        worker.stop()
        if schema:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of cost = a + b * rate: (per received span, per stored span)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0
    return mean_y - slope * mean_x, slope


def model(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Cores for MODEL_SPANS_PER_SECOND at MODEL_RATE, from the measured per-span costs."""
    out: dict[str, Any] = {
        "spans_per_second": MODEL_SPANS_PER_SECOND,
        "sample_rate": MODEL_RATE,
        "cost_model": "cpu_us_per_received_span = per_received + rate * per_stored",
    }
    for kind in sorted({r["store"] for r in runs}):
        mine = [r for r in runs if r["store"] == kind]
        if len({r["rate"] for r in mine}) < 2:
            continue  # one rate: nothing to fit
        figures = {"worker": "worker_cpu_us_per_span"}
        if kind == "postgres":
            figures["database"] = "postgres_backend_cpu_us_per_span"
            figures["database_aux"] = "postgres_aux_cpu_us_per_span"
        entry: dict[str, Any] = {}
        for role, key in figures.items():
            a, b = fit([(r["rate"], r[key]) for r in mine])
            us = a + MODEL_RATE * b
            entry[role] = {
                "per_received_span_us": round(a, 2),
                "per_stored_span_us": round(b, 2),
                "cores": round(MODEL_SPANS_PER_SECOND * us / 1e6, 2),
            }
        if "database" in entry:
            total = entry["database"]["cores"] + max(entry["database_aux"]["cores"], 0.0)
            entry["database_cores"] = round(total, 2)
        out[kind] = entry
    return out


def speedups(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median spans/s at each rate over the median at 100%, per store."""
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({r["store"] for r in runs}):
        by_rate: dict[float, list[int]] = {}
        for r in runs:
            if r["store"] == kind:
                by_rate.setdefault(r["rate"], []).append(r["spans_per_second"])
        median = {rate: sorted(v)[len(v) // 2] for rate, v in by_rate.items()}
        full = max(median.get(1.0, 1), 1)
        out[kind] = {f"{rate:g}": round(v / full, 2) for rate, v in sorted(median.items())}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="1 s runs at 100% and 1%")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--turns", type=int, default=60, help="agent turns per request")
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if args.load:
        run_load(args.load, args.seconds, args.threads, args.turns)
        return
    rates: tuple[float, ...] = RATES
    if args.smoke:
        args.seconds, args.rounds, args.turns, args.threads = 1.0, 1, 6, 2
        rates = (1.0, 0.01)
    from spanjudge._demo.judge import start_offline_judge

    judge = start_offline_judge()
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sj-ingest-") as tmp_name:
            tmp = Path(tmp_name)
            n = 0
            for _ in range(args.rounds):
                for kind in args.stores.split(","):
                    for rate in rates:  # the rates side by side, so the machine's load hits all
                        n += 1
                        try:
                            runs.append(one_run(kind, rate, args, tmp, judge, n))
                        except Exception as exc:  # reported, and the other runs still count
                            runs.append({"store": kind, "rate": rate, "error": str(exc)[-1500:]})
    finally:
        judge.stop()
    print(
        json.dumps(
            {
                "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
                "goal": GOAL,
                "runs": runs,
                "speedup_over_100pct": speedups([r for r in runs if "error" not in r]),
                "model": model([r for r in runs if "error" not in r]),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
