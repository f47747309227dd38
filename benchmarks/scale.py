"""Scale and memory of ``spanjudge worker`` (issue 16, part 4), with real processes.

Every run starts ``spanjudge worker`` processes and the scripted judge (the demo's offline rules
behind an OpenAI-compatible server: NOT a language model) in a process of its own; this script
is the load and the observer. It prints one JSON document with the figures, their goals and the
machine (CPU count, load averages before and after each part).

* ``memory``: one worker (SQLite store) receives ``--spans`` spans over OTLP/HTTP (demo agent
  traces, every span new) at ``--rate`` spans/s while the bias rule samples about
  ``--evaluations`` agent turns; the worker's VmRSS is sampled every second against spans
  received and evaluations done. Goal: flat within 10% after the warm-up (the first 5% of the
  spans and the first evaluations, which load litellm). ``--tracemalloc`` runs the worker under
  tracemalloc and writes the top growth between the first and the last snapshot.
* ``scale``: 1 and 3 workers on one PostgreSQL schema evaluate a burst of agent turns while the
  judge is the bottleneck (latency 1 s, 2 slots per worker). Each worker is warmed up first
  (litellm's import is paid before timing). Throughput is read from the stored results'
  start and finish times (10%-90% of completions: steady state) and over the whole burst.
* ``lag``: one worker receives ``--turns-per-second`` agent turns/s for ``--lag-seconds``; a
  loopback OTLP backend decodes what the worker emits and notes when each evaluation span
  arrives. Lag = evaluation span received - agent turn posted. Goal: p99 within settle + 2
  ticks + judge latency (calls per evaluation x latency).

    python benchmarks/scale.py [--parts memory,scale,lag] [--quick]
    python benchmarks/scale.py --smoke       # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
from worker import PG_URL, ROOT, Worker, demo_turns_request, remapped, span_count


def machine() -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "spanjudge", "evaluators", "exporters"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.split("\n")
    return {
        "uncommitted_package_files": sorted(line[3:] for line in dirty if line.strip()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "commit": commit,
    }


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 3)


# ------------------------------------------------------------------------- judge process
def run_judge_process(latency: float) -> None:
    """Entry of the judge process: serve until stdin closes, then print the calls answered."""
    from spanjudge._demo.judge import start_offline_judge

    server = start_offline_judge(latency=latency)
    print(server.base_url, flush=True)
    sys.stdin.read()
    calls = len(server.requests)
    server.stop()
    print(json.dumps({"judge_calls": calls}), flush=True)


class JudgeProcess:
    """The scripted judge (deterministic text rules, not an LLM) in a process of its own."""

    label = "offline scripted judge (deterministic text rules, not an LLM), own process"

    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--judge-process", str(latency)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().decode().strip()
        if not self.base_url.startswith("http"):
            raise RuntimeError("the judge process did not start")

    def stop(self) -> int:
        """Stop it; returns how many calls it answered."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read().decode().strip().splitlines()
        self.proc.wait(30)
        return int(json.loads(out[-1])["judge_calls"]) if out else -1


def worker_config(judge: JudgeProcess, **extra: Any) -> dict[str, Any]:
    return {
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": judge.base_url, "api_key": "x"},
        "retention_seconds": None,
        "judge_cache": False,  # every turn's text repeats: cached answers would skip the judge
        "rules": [{"metric": "bias", "target": "agent", "name": "bias"}],
        **extra,
    }


def post(client: Any, url: str, body: bytes) -> int:
    r = client.post(
        url + "/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}
    )
    return int(r.status_code)


def metric_total(url: str, name: str) -> float:
    """A counter from the worker's /metrics, summed over its labels."""
    import httpx

    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class RecordingBackend:
    """An OTLP/HTTP traces endpoint on loopback that decodes each request and notes when the
    evaluation span of each evaluated span (its parent) arrived."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        arrivals: dict[str, float] = {}
        self.arrivals = arrivals

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                now = time.time()
                if self.path.endswith("/v1/traces"):
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    for rs in request.resource_spans:
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                if s.name.startswith("evaluation"):
                                    arrivals.setdefault(s.parent_span_id.hex(), now)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def single_traces(request: Any) -> list[Any]:
    """One request per trace of ``request`` (resource and scope kept)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    out: dict[bytes, Any] = {}
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                part = out.get(s.trace_id)
                if part is None:
                    part = out[s.trace_id] = ExportTraceServiceRequest()
                    nrs = part.resource_spans.add()
                    nrs.resource.CopyFrom(rs.resource)
                    nrs.scope_spans.add().scope.CopyFrom(ss.scope)
                part.resource_spans[0].scope_spans[0].spans.add().CopyFrom(s)
    return list(out.values())


def mixed_turns() -> list[Any]:
    """The demo's single agent turns, one request each: answers with and without opinions, so
    the bias rule makes one judge call for some and two for others (jobs of unequal length)."""
    from spanjudge._demo.app import SINGLE_TURNS

    return single_traces(demo_turns_request(len(SINGLE_TURNS)))


def agent_span_ids(request: Any) -> list[str]:
    return [
        s.span_id.hex()
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
        if s.name.startswith("invoke_agent")
    ]


# ------------------------------------------------------------------------- memory
def bench_memory(
    spans: int, rate: float, evaluations: int, latency: float, tmp: Path, trace_memory: bool
) -> dict[str, Any]:
    """RSS of one worker over ``spans`` received and about ``evaluations`` evaluations."""
    import httpx

    base = demo_turns_request(20)
    per_batch = span_count(base)
    batches = -(-spans // per_batch)
    agents = batches * len(agent_span_ids(base))
    sample_rate = min(1.0, evaluations / agents)
    judge = JudgeProcess(latency)
    backend = RecordingBackend()
    config = worker_config(
        judge,
        store_url=f"sqlite:///{tmp}/memory.db",
        downstream_endpoint=backend.url + "/v1/traces",
        interval_seconds=1.0,
        settle_seconds=1.0,
        concurrency=8,
        judge_max_concurrency=8,
        rules=[{"metric": "bias", "target": "agent", "name": "bias", "sample_rate": sample_rate}],
    )
    snapshot_dir = tmp / "tracemalloc"
    worker: Worker
    if trace_memory:  # the same worker, under tracemalloc, dumping snapshots on SIGUSR1
        snapshot_dir.mkdir()
        worker = TracedWorker(config, tmp, "memory-traced", snapshot_dir)
    else:
        worker = Worker(config, tmp, "memory")
    sent = [0, 0]  # spans accepted, requests refused
    done = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=60) as client:
            started = time.perf_counter()
            for i in range(batches):
                body = remapped(base, 0x100000 + i).SerializeToString()
                while post(client, worker.url, body) != 200:  # 503: back off like a Collector
                    sent[1] += 1
                    time.sleep(0.2)
                sent[0] += per_batch
                ahead = sent[0] / rate - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        done.set()

    from spanjudge._store import open_store

    store = open_store(f"sqlite:///{tmp}/memory.db")
    samples: list[dict[str, Any]] = []
    load_before = _load()
    try:
        worker.wait_ready()
        started = time.time()
        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        backlog: list[int] = []
        while True:
            time.sleep(1.0)
            evaluated = metric_total(worker.url, "spanjudge_evaluations_total")
            stats = store.stats(now=time.time())
            backlog = [stats.unplanned_traces, stats.pending + stats.leased]
            samples.append(
                {
                    "t": round(time.time() - started, 1),
                    "spans": sent[0],
                    "evaluations": int(evaluated),
                    "rss_mb": round(worker.rss_mb(), 1),
                    "unplanned_traces": backlog[0],
                    "open_jobs": backlog[1],
                }
            )
            if isinstance(worker, TracedWorker) and len(samples) % 30 == 1:
                worker.snapshot()
            if done.is_set() and backlog == [0, 0]:
                break  # every trace planned, every sampled turn evaluated
        if isinstance(worker, TracedWorker):
            worker.snapshot()
            time.sleep(5)
        elapsed = time.time() - started
    finally:
        worker.stop()
        calls = judge.stop()
        backend.stop()
        store.close()
    # the warm-up: litellm is imported on the first evaluation, caches fill; the baseline is
    # the first sample past 5% of the spans with at least 1% of the evaluations done
    target_evals = samples[-1]["evaluations"]
    warm = next(
        (
            s
            for s in samples
            if s["spans"] >= 0.05 * spans and s["evaluations"] >= 0.01 * target_evals
        ),
        samples[0],
    )
    after = [s for s in samples if s["t"] >= warm["t"]]
    peak = max(s["rss_mb"] for s in after)
    result: dict[str, Any] = {
        "spans_received": sent[0],
        "refused_requests": sent[1],
        "evaluations": target_evals,
        "judge_calls": calls,
        "sample_rate": round(sample_rate, 5),
        "judge_latency_s": latency,
        "seconds": round(elapsed, 1),
        "baseline": warm,
        "rss_end_mb": samples[-1]["rss_mb"],
        "rss_peak_after_baseline_mb": peak,
        "growth_end_over_baseline": round(samples[-1]["rss_mb"] / warm["rss_mb"] - 1, 4),
        "growth_peak_over_baseline": round(peak / warm["rss_mb"] - 1, 4),
        "goal": "growth <= 0.10",
        "machine_load_before_after": [load_before, _load()],
        "samples": samples[:: max(1, len(samples) // 60)] + samples[-1:],
    }
    if trace_memory:
        result["tracemalloc_top_growth"] = tracemalloc_diff(snapshot_dir)
    return result


class TracedWorker(Worker):
    """A worker run under tracemalloc (25 frames): SIGUSR1 writes a snapshot to ``directory``."""

    def __init__(self, config: dict[str, Any], tmp: Path, name: str, directory: Path) -> None:
        self.directory = directory
        path = tmp / f"{name}.json"
        from worker import _free_port

        self.port = _free_port()
        path.write_text(json.dumps({"receiver_port": self.port, **config}))
        self.log = (tmp / f"{name}.log").open("wb")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--traced-worker", str(path), "--snapshots", str(directory)],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def snapshot(self) -> None:
        import signal

        self.proc.send_signal(signal.SIGUSR1)


def run_traced_worker(config: str, directory: str) -> None:
    import signal
    import tracemalloc

    tracemalloc.start(25)
    count = [0]

    def dump(signum: int, frame: Any) -> None:
        count[0] += 1
        tracemalloc.take_snapshot().dump(f"{directory}/{count[0]:04d}.snap")

    signal.signal(signal.SIGUSR1, dump)
    sys.argv = ["spanjudge", "worker", "--config", config]
    from spanjudge.cli.app import main

    main()


def tracemalloc_diff(directory: Path) -> list[str]:
    import tracemalloc

    snaps = sorted(directory.glob("*.snap"))
    if len(snaps) < 3:
        return [f"only {len(snaps)} snapshots"]
    # the second snapshot (after the warm-up) against the last
    first = tracemalloc.Snapshot.load(str(snaps[1]))
    last = tracemalloc.Snapshot.load(str(snaps[-1]))
    stats = last.compare_to(first, "traceback")
    out = []
    for stat in stats[:8]:
        frames = [f"{f.filename}:{f.lineno}" for f in stat.traceback[-6:]]
        out.append(
            f"{stat.size_diff / 1e6:+.2f} MB ({stat.count_diff:+d} blocks) "
            + " < ".join(reversed(frames))
        )
    return out


# ------------------------------------------------------------------------- scale-out
def timed_setup(
    latency: float, concurrency: int, **store: Any
) -> tuple[JudgeProcess, RecordingBackend, dict[str, Any]]:
    """The judge process, the recording backend and a worker config with settle 0.5 s, tick
    0.25 s and ``concurrency`` judge slots (scale-out and lag runs)."""
    judge = JudgeProcess(latency)
    backend = RecordingBackend()
    config = worker_config(
        judge,
        downstream_endpoint=backend.url + "/v1/traces",
        interval_seconds=0.25,
        settle_seconds=0.5,
        concurrency=concurrency,
        judge_max_concurrency=concurrency,
        **store,
    )
    return judge, backend, config


def bench_scale(
    n_workers: int, turns: int, latency: float, concurrency: int, tmp: Path
) -> dict[str, Any]:
    """``n_workers`` on one PostgreSQL schema evaluate ``turns`` agent turns (one trace each,
    spread round-robin over the workers' receivers) posted at once."""
    import httpx

    from spanjudge._store import open_store

    schema = f"sjscale_{uuid.uuid4().hex[:8]}"
    judge, backend, config = timed_setup(
        latency, concurrency, store_url=PG_URL, store_schema=schema
    )
    settle, interval = config["settle_seconds"], config["interval_seconds"]
    store = open_store(PG_URL, schema=schema)
    workers = [Worker(config, tmp, f"scale{n_workers}-{i}") for i in range(n_workers)]
    kinds = mixed_turns()
    load_before = _load()
    try:
        for w in workers:
            w.wait_ready()
        with httpx.Client(timeout=60) as client:
            # warm-up: enough turns that every worker evaluates some (litellm's import and
            # first connection are paid here), not counted
            warm = 2 * n_workers * concurrency
            for i in range(warm):
                turn = remapped(kinds[i % len(kinds)], 0xAA0000 + i)
                post(client, workers[i % n_workers].url, turn.SerializeToString())
            deadline = time.time() + 300
            while len(store.results(rule="bias", limit=100_000)) < warm:
                if time.time() > deadline:
                    raise RuntimeError("warm-up did not finish")
                time.sleep(0.2)
            warmed = [metric_total(w.url, "spanjudge_evaluations_total") for w in workers]
            bodies = []
            ids: set[str] = set()
            for i in range(turns):
                request = remapped(kinds[i % len(kinds)], 0xBB0000 + i)
                ids.update(agent_span_ids(request))
                bodies.append(request.SerializeToString())
            time.sleep(2 * interval)
            t0 = time.time()
            for i, body in enumerate(bodies):
                post(client, workers[i % n_workers].url, body)
        deadline = time.time() + 900
        records: list[Any] = []
        while time.time() < deadline:
            records = [r for r in store.results(rule="bias", limit=100_000) if r.target_id in ids]
            if len(records) >= len(ids):
                break
            time.sleep(0.2)
        per_worker = [
            int(metric_total(w.url, "spanjudge_evaluations_total") - warmed[k])
            for k, w in enumerate(workers)
        ]
    finally:
        for w in workers:
            w.stop()
        calls = judge.stop()
        backend.stop()
        store.drop_schema()  # type: ignore[attr-defined]
        store.close()
    finished = sorted(r.finished_at for r in records if r.finished_at)
    judge_calls = sum(r.judge_calls for r in records)
    calls_per_eval = judge_calls / max(len(records), 1)
    lo, hi = int(len(finished) * 0.1), int(len(finished) * 0.9)
    steady = (hi - lo) / max(finished[hi - 1] - finished[lo], 1e-9) if hi - 1 > lo else None
    whole = len(finished) / max(finished[-1] - t0 - settle, 1e-9) if finished else None
    bound = n_workers * concurrency / (calls_per_eval * latency)
    return {
        "workers": n_workers,
        "evaluations": len(records),
        "errors": sum(1 for r in records if r.status != "scored"),
        "evaluations_per_worker": per_worker,
        "judge_calls_per_evaluation": round(calls_per_eval, 3),
        "judge_calls_total_incl_warmup": calls,
        "steady_evaluations_per_second": round(steady, 3) if steady else None,
        "burst_evaluations_per_second": round(whole, 3) if whole else None,
        "bound_evaluations_per_second": round(bound, 3),
        "steady_share_of_bound": round(steady / bound, 3) if steady else None,
        "burst_share_of_bound": round(whole / bound, 3) if whole else None,
        "machine_load_before_after": [load_before, _load()],
    }


# ------------------------------------------------------------------------- lag
def bench_lag(
    per_second: float, seconds: float, latency: float, concurrency: int, tmp: Path
) -> dict[str, Any]:
    """One worker, ``per_second`` agent turns/s; lag = evaluation span at the backend - post."""
    import httpx

    judge, backend, config = timed_setup(latency, concurrency, store_url=f"sqlite:///{tmp}/lag.db")
    settle, interval = config["settle_seconds"], config["interval_seconds"]
    worker = Worker(config, tmp, "lag")
    kinds = mixed_turns()
    posted: dict[str, float] = {}
    load_before = _load()
    try:
        worker.wait_ready()
        with httpx.Client(timeout=60) as client:
            for i in range(2 * concurrency):  # warm-up, not counted
                turn = remapped(kinds[i % len(kinds)], 0xCC0000 + i)
                post(client, worker.url, turn.SerializeToString())
            deadline = time.time() + 120
            while len(backend.arrivals) < 2 * concurrency and time.time() < deadline:
                time.sleep(0.1)
            total = int(per_second * seconds)
            bodies = []
            for i in range(total):
                request = remapped(kinds[i % len(kinds)], 0xDD0000 + i)
                bodies.append((agent_span_ids(request)[0], request.SerializeToString()))
            cpu_before = cpu_seconds(worker.proc.pid)
            started = time.perf_counter()
            behind = 0.0
            for i, (span_id, body) in enumerate(bodies):
                wait = i / per_second - (time.perf_counter() - started)
                if wait > 0:
                    time.sleep(wait)
                else:
                    behind = max(behind, -wait)
                posted[span_id] = time.time()
                post(client, worker.url, body)
            send_seconds = time.perf_counter() - started
            worker_cpu = (cpu_seconds(worker.proc.pid) - cpu_before) / send_seconds
        deadline = time.time() + 300
        while time.time() < deadline and not all(k in backend.arrivals for k in posted):
            time.sleep(0.1)
    finally:
        worker.stop()
        calls = judge.stop()
        backend.stop()
    lags = [backend.arrivals[k] - t for k, t in posted.items() if k in backend.arrivals]
    calls_per_eval = calls / max(len(lags) + 2 * concurrency, 1)
    # where the lag goes: posted -> evaluation started (settle, tick, planning, a free slot),
    # started -> finished (judge calls, result stored), finished -> evaluation span received
    from spanjudge._store import open_store

    store = open_store(f"sqlite:///{tmp}/lag.db")
    try:
        records = {r.target_id: r for r in store.results(rule="bias", limit=100_000)}
    finally:
        store.close()
    # when each job was planned (its row's creation time): splits posted -> started into the
    # wait for settling and planning, and the wait for a free evaluation slot
    with sqlite3.connect(f"{tmp}/lag.db") as db:
        planned = dict(db.execute("SELECT target_id, created_at FROM jobs WHERE rule = 'bias'"))
    parts: dict[str, list[float]] = {
        "to_start": [],
        "to_planned": [],
        "planned_to_start": [],
        "judging": [],
        "to_backend": [],
    }
    for k, t in posted.items():
        r = records.get(k)
        if r is None or r.started_at is None or r.finished_at is None or k not in backend.arrivals:
            continue
        parts["to_start"].append(r.started_at - t)
        if k in planned:
            parts["to_planned"].append(planned[k] - t)
            parts["planned_to_start"].append(r.started_at - planned[k])
        parts["judging"].append(r.finished_at - r.started_at)
        parts["to_backend"].append(backend.arrivals[k] - r.finished_at)
    return {
        "turns_per_second": per_second,
        "turns": len(posted),
        "send_seconds": round(send_seconds, 2),
        "load_fell_behind_s": round(behind, 3),
        "worker_cpu_cores_while_sending": round(worker_cpu, 2),
        "evaluations_emitted": len(lags),
        "judge_calls_per_evaluation": round(calls_per_eval, 3),
        "judge_latency_s": latency,
        "concurrency": concurrency,
        "lag_p50_s": _quantile(lags, 0.5),
        "lag_p99_s": _quantile(lags, 0.99),
        "lag_max_s": round(max(lags), 3) if lags else None,
        "lag_goal_s": round(settle + 2 * interval + calls_per_eval * latency, 3),
        "lag_parts_p50_p99_s": {
            name: [_quantile(values, 0.5), _quantile(values, 0.99)]
            for name, values in parts.items()
        },
        "settle_s": settle,
        "tick_s": interval,
        "machine_load_before_after": [load_before, _load()],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--judge-process", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--traced-worker", help=argparse.SUPPRESS)
    parser.add_argument("--snapshots", help=argparse.SUPPRESS)
    parser.add_argument("--parts", default="memory,scale,lag")
    parser.add_argument("--quick", action="store_true", help="100k spans, 1k evaluations")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: every part at tiny sizes, one worker (checks the script runs)",
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=4000.0, help="spans/s sent (memory)")
    parser.add_argument("--evaluations", type=int, default=10_000)
    parser.add_argument("--memory-latency", type=float, default=0.05)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--workers", default="1,3")
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--latency", type=float, default=1.0, help="judge latency (scale)")
    parser.add_argument("--concurrency", type=int, default=2, help="judge slots per worker")
    parser.add_argument("--turns-per-second", type=float, default=50.0)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    parser.add_argument("--lag-latency", type=float, default=0.1)
    parser.add_argument("--lag-concurrency", type=int, default=16)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if args.judge_process is not None:
        run_judge_process(args.judge_process)
        return
    if args.traced_worker:
        run_traced_worker(args.traced_worker, args.snapshots)
        return
    if args.quick:
        args.spans, args.evaluations = 100_000, 1_000
    if args.smoke:
        args.spans, args.rate, args.evaluations, args.memory_latency = 1_300, 5_000.0, 10, 0.01
        args.workers, args.turns, args.latency, args.concurrency = "1", 8, 0.05, 2
        args.turns_per_second, args.lag_seconds, args.lag_latency = 10.0, 1.0, 0.02
        args.lag_concurrency = 2
    parts = args.parts.split(",")
    result: dict[str, Any] = {"machine": machine(), "judge": JudgeProcess.label}
    with tempfile.TemporaryDirectory(prefix="sj-scale-") as tmp_name:
        tmp = Path(tmp_name)
        if "memory" in parts:
            result["memory"] = bench_memory(
                args.spans, args.rate, args.evaluations, args.memory_latency, tmp, args.tracemalloc
            )
        if "scale" in parts:
            runs = [
                bench_scale(int(n), args.turns, args.latency, args.concurrency, tmp)
                for n in args.workers.split(",")
            ]
            result["scale_out"] = runs
            one = runs[0]
            for run in runs[1:]:
                for kind in ("steady", "burst"):
                    key = f"{kind}_evaluations_per_second"
                    if one[key] and run[key]:
                        result.setdefault("scale_ratios", {})[
                            f"{kind}_{run['workers']}_over_{one['workers']}"
                        ] = round(run[key] / one[key], 3)
        if "lag" in parts:
            result["lag"] = bench_lag(
                args.turns_per_second,
                args.lag_seconds,
                args.lag_latency,
                args.lag_concurrency,
                tmp,
            )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
