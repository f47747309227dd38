"""``spanjudge worker`` as a service: OTLP ingest rate, evaluation scale-out, lag, memory.

* ingest: a SEPARATE load process posts protobuf batches (demo agent traces, ids remapped per
  copy so every span is new) over loopback to one worker; spans/s into SQLite and PostgreSQL.
  The worker's evaluation loop is parked (long interval) so only ingest is measured.
* scale-out: 1, 2 and 3 worker processes on one PostgreSQL schema evaluate a burst of agent
  turns (bias rule on agent spans) against the scripted judge at a fixed latency; compared with
  the bound ``workers * concurrency / (judge calls per evaluation * latency)``.
* lag: trace end (the post) to the result being stored, p50/p99, from the scale-out runs.
* rss: worker VmRSS after each run.
* enrich: the same ingest run with ``mode = "enrich"`` (every span also gets an outbox entry and
  is forwarded to a loopback backend that accepts without parsing), run right after the
  child-span run on the same store kind, so the outbox's cost is read side by side; plus how
  many spans were forwarded and how long the forwarder took to catch up after the load ended.
* write cpu (``--write-cpu``): in process on PostgreSQL, the CPU per span of decoding and
  writing the same batches in both modes, this process's and the server's apart.

    python benchmarks/worker.py [--seconds 5] [--turns 120] [--latency 0.1] [--ingest-only]
    python benchmarks/worker.py --write-cpu [--rounds 3]
    python benchmarks/worker.py --smoke      # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("SPANJUDGE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def demo_turns_request(turns: int) -> Any:
    """``turns`` single agent turns of the demo app, traced by the real tracer, as one request."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import spanjudge
    from spanjudge._demo.app import SINGLE_TURNS, support_agent

    mem = InMemorySpanExporter()
    handle = spanjudge.configure(
        service_name="support-bot", span_processors=[SimpleSpanProcessor(mem)], export_otlp=False
    )
    for i in range(turns):
        support_agent(SINGLE_TURNS[i % len(SINGLE_TURNS)].question)
    handle.force_flush()
    return encode_spans(mem.get_finished_spans())


def remapped(request: Any, copy: int) -> Any:
    """The same spans with ids XOR-ed by ``copy``: new traces, parent links kept."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    out = ExportTraceServiceRequest()
    out.CopyFrom(request)
    now = time.time_ns()
    for rs in out.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                s.trace_id = (int.from_bytes(s.trace_id, "big") ^ copy).to_bytes(16, "big")
                s.span_id = (int.from_bytes(s.span_id, "big") ^ copy).to_bytes(8, "big")
                if s.parent_span_id:
                    parent = int.from_bytes(s.parent_span_id, "big") ^ copy
                    s.parent_span_id = parent.to_bytes(8, "big")
                duration = s.end_time_unix_nano - s.start_time_unix_nano
                s.end_time_unix_nano = now
                s.start_time_unix_nano = now - duration
    return out


def span_count(request: Any) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


# ------------------------------------------------------------------------- load process
def run_load(url: str, seconds: float, threads: int) -> None:
    """Entry of the load process: post remapped copies for ``seconds``; print JSON."""
    import httpx

    base = demo_turns_request(20)
    batches = [remapped(base, i + 1).SerializeToString() for i in range(threads * 4)]
    per_batch = span_count(base)
    counter = [0, 0]  # spans accepted, refused requests
    lock = threading.Lock()
    stop = time.perf_counter() + seconds
    copy_ids = iter(range(10_000, 10**9))

    def worker(tid: int) -> None:
        with httpx.Client(timeout=30) as client:
            k = 0
            while time.perf_counter() < stop:
                with lock:
                    copy = next(copy_ids)
                body = (
                    batches[(tid * 4 + k) % len(batches)]
                    if k < 4
                    else remapped(base, copy).SerializeToString()
                )
                k += 1
                r = client.post(
                    url, content=body, headers={"Content-Type": "application/x-protobuf"}
                )
                with lock:
                    if r.status_code == 200:
                        counter[0] += per_batch
                    else:
                        counter[1] += 1

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    print(
        json.dumps(
            {
                "spans": counter[0],
                "refused_requests": counter[1],
                "seconds": elapsed,
                "spans_per_batch": per_batch,
            }
        )
    )


# ------------------------------------------------------------------------- workers
class Worker:
    def __init__(self, config: dict[str, Any], tmp: Path, name: str) -> None:
        self.port = _free_port()
        path = tmp / f"{name}.json"
        path.write_text(json.dumps({"receiver_port": self.port, **config}))
        self.log = (tmp / f"{name}.log").open("wb")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spanjudge.cli", "worker", "--config", str(path)],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        import httpx

        for _ in range(300):
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("worker not ready")

    def cpu_seconds(self) -> tuple[float, float]:
        """User and system CPU the worker process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _postgres_cpu_seconds() -> float:
    """User + system CPU of every PostgreSQL server process on this machine so far (the
    worker's store connections are among them; a process that exits meanwhile is not counted)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        name, rest = text.split("(", 1)[1].rsplit(")", 1)
        if name == "postgres":
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def _judge_config(judge: Any) -> dict[str, Any]:
    return {
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": judge.base_url, "api_key": "x"},
        "retention_seconds": None,
        "rules": [{"metric": "bias", "target": "agent", "name": "bias"}],
        "downstream_endpoint": "http://127.0.0.1:9/v1/traces",  # nothing listens: scores dropped
    }


class NullBackend:
    """An OTLP/HTTP endpoint on loopback that answers 200 without decoding (enrich forwarding)."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a Collector answers

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _forwarding(url: str) -> tuple[int, int]:
    """(spans forwarded, spans due and not forwarded yet) from the worker's /metrics."""
    import httpx

    total, due = 0.0, 0.0
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("spanjudge_enrich_forwarded_spans_total{"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("spanjudge_backlog{") and 'state="unforwarded_spans"' in line:
            due = float(line.rsplit(" ", 1)[1])
    return int(total), int(due)


def bench_ingest(
    store_url: str, schema: str | None, seconds: float, tmp: Path, mode: str = "child-span"
) -> dict[str, Any]:
    from spanjudge._demo.judge import start_offline_judge

    judge = start_offline_judge()
    config = {**_judge_config(judge), "store_url": store_url, "interval_seconds": 3600.0}
    if schema:
        config["store_schema"] = schema
    backend = NullBackend() if mode == "enrich" else None
    if backend is not None:
        config.update(mode="enrich", downstream_endpoint=backend.url, max_hold_seconds=3600.0)
    worker = Worker(config, tmp, f"ingest-{mode}-{schema or 'sqlite'}")
    try:
        worker.wait_ready()
        cpu_before = worker.cpu_seconds()
        postgres_before = _postgres_cpu_seconds() if schema else 0.0
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--load",
                worker.url + "/v1/traces",
                "--seconds",
                str(seconds),
            ],
            capture_output=True,
            check=True,
            cwd=ROOT,
        ).stdout
        load = json.loads(out)
        load["spans_per_second"] = round(load["spans"] / load["seconds"])
        # the worker's CPU per span received (forwarding included, up to the load's end)
        user, system = (a - b for a, b in zip(worker.cpu_seconds(), cpu_before, strict=True))
        per_span = 1e6 / max(load["spans"], 1)
        load["worker_cpu_us_per_span"] = round((user + system) * per_span, 1)
        load["worker_system_cpu_us_per_span"] = round(system * per_span, 1)
        if schema:  # the server shares the cores: its CPU per span weighs on the ratio too
            postgres = _postgres_cpu_seconds() - postgres_before
            load["postgres_cpu_us_per_span"] = round(postgres * per_span, 1)
        load["worker_rss_mb"] = round(worker.rss_mb(), 1)
        if backend is not None:
            # held spans (agent spans, for the bias rule) wait for evaluations that are parked
            # here, so only the pass-through share can be forwarded during this run. Drained:
            # the backlog gauge shows no due span left (polled every 0.1 s from the load's end)
            ended = time.perf_counter()
            forwarded, due = _forwarding(worker.url)
            load["due_at_load_end"] = due
            while due > 0 and time.perf_counter() - ended < 60:
                time.sleep(0.1)
                forwarded, due = _forwarding(worker.url)
            load["drain_seconds"] = round(time.perf_counter() - ended, 2)
            load["forwarded_spans"] = forwarded
            load["forwarded_share"] = round(forwarded / max(load["spans"], 1), 3)
        return load
    finally:
        worker.stop()
        judge.stop()
        if backend is not None:
            backend.stop()


def bench_scale(
    n_workers: int, turns: int, latency: float, concurrency: int, tmp: Path
) -> dict[str, Any]:
    import httpx

    from spanjudge._demo.judge import start_offline_judge
    from spanjudge._store import open_store

    schema = f"sjbench_{uuid.uuid4().hex[:8]}"
    judge = start_offline_judge(latency=latency)
    backend = NullBackend()
    settle, interval = 0.5, 0.25
    config = {
        **_judge_config(judge),
        "downstream_endpoint": backend.url,
        "store_url": PG_URL,
        "store_schema": schema,
        "interval_seconds": interval,
        "settle_seconds": settle,
        "concurrency": concurrency,
        "judge_max_concurrency": concurrency,
    }
    store = open_store(PG_URL, schema=schema)
    workers = [Worker(config, tmp, f"scale{n_workers}-{i}") for i in range(n_workers)]
    try:
        for w in workers:
            w.wait_ready()
        request = remapped(demo_turns_request(turns), n_workers * 7919)
        agents = {
            s.span_id.hex(): s.end_time_unix_nano / 1e9
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
            if s.name.startswith("invoke_agent")
        }
        # each trace goes to one worker, traces spread round-robin
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        parts = [ExportTraceServiceRequest() for _ in workers]
        traces: dict[bytes, int] = {}
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                targets = []
                for p in parts:
                    nrs = p.resource_spans.add()
                    nrs.resource.CopyFrom(rs.resource)
                    nss = nrs.scope_spans.add()
                    nss.scope.CopyFrom(ss.scope)
                    targets.append(nss)
                for s in ss.spans:
                    idx = traces.setdefault(s.trace_id, len(traces) % len(workers))
                    targets[idx].spans.add().CopyFrom(s)
        calls_before = len(judge.requests)
        t0 = time.time()
        for w, p in zip(workers, parts, strict=True):
            httpx.post(
                w.url + "/v1/traces",
                content=p.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=60,
            )
        seen: dict[str, float] = {}
        deadline = time.time() + 600
        while len(seen) < len(agents) and time.time() < deadline:
            now = time.time()
            for r in store.results(rule="bias", limit=100_000):
                seen.setdefault(r.target_id, now)
            time.sleep(0.05)
        t_end = max(seen.values()) if seen else time.time()
        calls = len(judge.requests) - calls_before
        lags = sorted(seen[k] - agents[k] for k in seen if k in agents)
        evals = len(seen)
        calls_per_eval = calls / max(evals, 1)
        busy = t_end - t0 - settle  # evaluation can only start after the settle time
        bound = n_workers * concurrency / (calls_per_eval * latency)
        return {
            "workers": n_workers,
            "evaluations": evals,
            "judge_calls_per_evaluation": round(calls_per_eval, 2),
            "evaluations_per_second": round(evals / max(busy, 1e-9), 2),
            "bound_evaluations_per_second": round(bound, 2),
            "lag_p50_s": round(lags[len(lags) // 2], 3) if lags else None,
            "lag_p99_s": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 3)
            if lags
            else None,
            "lag_goal_s": round(settle + interval + calls_per_eval * latency, 3),
            "worker_rss_mb": [round(w.rss_mb(), 1) for w in workers],
        }
    finally:
        for w in workers:
            w.stop()
        judge.stop()
        backend.stop()
        store.drop_schema()  # type: ignore[attr-defined]
        store.close()


def bench_lag_steady(
    traces: int, gap: float, latency: float, tmp: Path, backend_up: bool = True
) -> dict[str, Any]:
    """Lag at a sustainable rate: one agent turn every ``gap`` seconds to one worker (the burst
    in bench_scale measures queueing instead). Lag = result stored - the turn's end. One turn
    is sent first and not counted (it pays litellm's import). ``backend_up=False``: the
    downstream OTLP endpoint refuses connections for the whole run."""
    import httpx

    from spanjudge._demo.judge import start_offline_judge
    from spanjudge._store import open_store

    judge = start_offline_judge(latency=latency)
    backend = NullBackend()
    settle, interval = 0.5, 0.25
    store_url = f"sqlite:///{tmp}/lag-{backend_up}.db"
    config = {
        **_judge_config(judge),
        "downstream_endpoint": backend.url if backend_up else "http://127.0.0.1:9/v1/traces",
        "store_url": store_url,
        "interval_seconds": interval,
        "settle_seconds": settle,
    }
    worker = Worker(config, tmp, f"lag-{backend_up}")
    store = open_store(store_url)
    one_turn = demo_turns_request(1)
    ends: dict[str, float] = {}
    seen: dict[str, float] = {}
    try:
        worker.wait_ready()
        httpx.post(  # warm-up turn, not counted
            worker.url + "/v1/traces",
            content=remapped(one_turn, 0x3A3A).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        warm_deadline = time.time() + 60
        while not store.results(rule="bias") and time.time() < warm_deadline:
            time.sleep(0.05)
        calls_before = len(judge.requests)

        def post_all() -> None:
            for i in range(traces):
                request = remapped(one_turn, 0x5EED0000 + i)
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            if sp.name.startswith("invoke_agent"):
                                ends[sp.span_id.hex()] = sp.end_time_unix_nano / 1e9
                httpx.post(
                    worker.url + "/v1/traces",
                    content=request.SerializeToString(),
                    headers={"Content-Type": "application/x-protobuf"},
                    timeout=30,
                )
                time.sleep(gap)

        poster = threading.Thread(target=post_all)
        poster.start()
        deadline = time.time() + traces * gap + 120
        while time.time() < deadline and (poster.is_alive() or len(seen) < len(ends)):
            now = time.time()
            for r in store.results(rule="bias", limit=100_000):
                if r.target_id in ends:
                    seen.setdefault(r.target_id, now)
            time.sleep(0.05)
        poster.join()
        calls_per_eval = (len(judge.requests) - calls_before) / max(len(seen), 1)
        lags = sorted(seen[k] - ends[k] for k in seen if k in ends)
        return {
            "backend": "up" if backend_up else "refusing connections",
            "traces": traces,
            "gap_seconds": gap,
            "evaluations": len(seen),
            "judge_calls_per_evaluation": round(calls_per_eval, 2),
            "lag_p50_s": round(lags[len(lags) // 2], 3) if lags else None,
            "lag_p99_s": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 3)
            if lags
            else None,
            "lag_goal_s": round(settle + interval + calls_per_eval * latency, 3),
        }
    finally:
        worker.stop()
        judge.stop()
        backend.stop()
        store.close()


def ingest_rounds(args: Any, tmp: Path) -> dict[str, Any]:
    """Child-span and enrich ingest side by side: ``--rounds`` alternating pairs per store kind
    (fresh store each run), so a change in the machine's load hits both modes alike. Each
    round's ratio is enrich / child-span of that pair; the median ratio is the figure."""
    from spanjudge._store import open_store

    out: dict[str, Any] = {}
    for kind in ("sqlite", "postgres"):
        runs: dict[str, list[dict[str, Any]]] = {"child-span": [], "enrich": []}
        ratios = []
        for i in range(args.rounds):
            pair = {}
            for mode in ("child-span", "enrich"):
                name = f"{kind}-{mode}-{i}"
                if kind == "sqlite":
                    pair[mode] = bench_ingest(
                        f"sqlite:///{tmp}/{name}.db", None, args.seconds, tmp, mode
                    )
                    continue
                schema = f"sjbench_{uuid.uuid4().hex[:8]}"
                try:
                    pair[mode] = bench_ingest(PG_URL, schema, args.seconds, tmp, mode)
                finally:
                    store = open_store(PG_URL, schema=schema)
                    store.drop_schema()  # type: ignore[attr-defined]
                    store.close()
            for mode, run in pair.items():
                runs[mode].append(run)
            ratios.append(
                pair["enrich"]["spans_per_second"] / max(pair["child-span"]["spans_per_second"], 1)
            )
        out[f"ingest_{kind}"] = runs["child-span"]
        out[f"ingest_{kind}_enrich"] = runs["enrich"]
        out[f"enrich_ingest_ratio_{kind}"] = [round(r, 2) for r in ratios]
        out[f"enrich_ingest_ratio_{kind}_median"] = round(sorted(ratios)[len(ratios) // 2], 2)
        out[f"drain_seconds_{kind}_max"] = max(r["drain_seconds"] for r in runs["enrich"])
        for figure in (
            "worker_cpu_us_per_span",
            "worker_system_cpu_us_per_span",
            "postgres_cpu_us_per_span",
        ):
            if figure in runs["enrich"][0]:
                out[f"{figure}_{kind}_median"] = {
                    mode: sorted(r[figure] for r in done)[len(done) // 2]
                    for mode, done in runs.items()
                }
    return out


def _enrich_writer(store: Any) -> Any:
    """An enricher whose bias rule holds the agent spans, forwarding nowhere (in process)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from spanjudge.evaluators._enrich.forwarder import Enricher
    from spanjudge.evaluators._judge.metrics.bias import BiasMetric
    from spanjudge.evaluators._plan.rules import Rule

    return Enricher([Rule(BiasMetric(), target="agent")], store, InMemorySpanExporter())


def _write_batches(store: Any, enricher: Any, mode: str, bodies: Any) -> int:
    """Decode and write each received body as the worker does (enrich: with its outbox
    entries); the spans written."""
    from spanjudge._receive.decode import PROTOBUF, decode_traces

    spans = 0
    for body in bodies:
        records = decode_traces(body, PROTOBUF, rejected=[], keep_bytes=mode == "enrich")
        now = time.time()
        entries = enricher.outbox_entries(records, now) if mode == "enrich" else ()
        store.write_spans(records, now=now, outbox=entries)
        spans += len(records)
    return spans


def write_pages(batches: int, stored: int) -> dict[str, Any]:
    """In process, deterministic: SQLite pages written to the WAL per received batch (65 spans,
    a store already holding ``stored`` batches), child-span write against enrich write (the
    bias rule holds the agent spans). A page rewritten in each commit counts each time: what
    the commits cost on this store, without the machine's load in the figure."""
    from spanjudge._store.sqlite import SQLiteStore

    base = demo_turns_request(20)
    copies = iter(range(1, 10**9))
    out: dict[str, Any] = {"batches": batches, "stored_batches": stored}

    def bodies(count: int) -> Any:
        return (remapped(base, next(copies)).SerializeToString() for _ in range(count))

    with tempfile.TemporaryDirectory(prefix="sj-pages-") as tmp:
        for mode in ("child-span", "enrich"):
            path = f"{tmp}/{mode}.db"
            store = SQLiteStore(path, pragmas={"wal_autocheckpoint": 0})
            enricher = _enrich_writer(store)
            _write_batches(store, enricher, mode, bodies(stored))
            with contextlib.closing(sqlite3.connect(path)) as conn:  # WAL emptied, then timed
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            spans = _write_batches(store, enricher, mode, bodies(batches))
            wal = os.path.getsize(path + "-wal")
            store.close()
            page = 4096 + 24  # a WAL frame: its header and one page
            out[mode] = {"wal_pages_per_batch": round(wal / page / batches, 1), "spans": spans}
    out["enrich_over_child_span"] = round(
        out["enrich"]["wal_pages_per_batch"] / out["child-span"]["wal_pages_per_batch"], 2
    )
    return out


def write_cpu(batches: int, rounds: int) -> dict[str, Any]:
    """In process, on PostgreSQL: CPU per span of decoding and writing received batches,
    child-span against enrich (hold decisions, outbox rows, compression, the outbox insert),
    this process's and the server's apart. ``rounds`` alternating pairs, each mode on a fresh
    schema and on the same ``batches`` bodies of that round; medians of the rounds. Leaves out
    what both modes share outside the write (HTTP) and forwarding: the ingest runs hold those."""
    from spanjudge._store import open_store

    base = demo_turns_request(20)
    cpu: dict[str, list[tuple[float, float]]] = {"child-span": [], "enrich": []}
    for r in range(rounds):
        bodies = [remapped(base, r * batches + i + 1).SerializeToString() for i in range(batches)]
        warm = [remapped(base, 10**8 + i).SerializeToString() for i in range(5)]
        for mode in ("child-span", "enrich"):
            store = open_store(PG_URL, schema=f"sjbench_{uuid.uuid4().hex[:8]}")
            try:
                enricher = _enrich_writer(store)
                _write_batches(store, enricher, mode, warm)  # statements prepared, pool full
                server, own = _postgres_cpu_seconds(), time.process_time()
                spans = _write_batches(store, enricher, mode, bodies)
                own, server = time.process_time() - own, _postgres_cpu_seconds() - server
                cpu[mode].append((own * 1e6 / spans, server * 1e6 / spans))
            finally:
                store.drop_schema()  # type: ignore[attr-defined]
                store.close()
    out: dict[str, Any] = {"batches": batches, "rounds": rounds}
    for mode, runs in cpu.items():
        own = sorted(r[0] for r in runs)[rounds // 2]
        server = sorted(r[1] for r in runs)[rounds // 2]
        out[mode] = {
            "process_cpu_us_per_span": round(own, 1),
            "postgres_cpu_us_per_span": round(server, 1),
            "runs": [[round(a, 1), round(b, 1)] for a, b in runs],
        }
    child, enrich = out["child-span"], out["enrich"]
    out["enrich_minus_child_span_us"] = {
        key: round(enrich[key] - child[key], 1)
        for key in ("process_cpu_us_per_span", "postgres_cpu_us_per_span")
    }
    total = [m["process_cpu_us_per_span"] + m["postgres_cpu_us_per_span"] for m in (child, enrich)]
    out["child_span_over_enrich_cpu"] = round(total[0] / total[1], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: one 1 s ingest pair per store, one lag run, one worker in the "
        "scale-out (checks the script runs)",
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="child-span/enrich ingest pairs")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--ingest-only", action="store_true", help="skip the scale-out runs")
    parser.add_argument("--lag-traces", type=int, default=20)
    parser.add_argument("--lag-gap", type=float, default=1.0)
    parser.add_argument("--lag-only", action="store_true", help="only the steady-rate lag run")
    parser.add_argument("--scale-only", action="store_true", help="only the scale-out runs")
    parser.add_argument(
        "--pages-only",
        action="store_true",
        help="only the in-process WAL pages per batch, child-span and enrich writes (SQLite)",
    )
    parser.add_argument(
        "--write-cpu",
        action="store_true",
        help="only the in-process CPU per span of child-span and enrich writes (PostgreSQL)",
    )
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if args.load:
        run_load(args.load, args.seconds, args.threads)
        return
    if args.smoke:
        args.seconds, args.rounds, args.turns, args.latency = 1.0, 1, 6, 0.02
        args.lag_traces, args.lag_gap = 2, 0.2
    scale_workers = (1,) if args.smoke else (1, 2, 3)
    lag_backend = (True,) if args.smoke else (True, False)

    if args.pages_only:
        pages = [write_pages(100, stored) for stored in (100, 400)]
        print(json.dumps({"machine": _machine(), "write_pages": pages}, indent=2))
        return

    if args.write_cpu:
        cpu = write_cpu(150, args.rounds)
        print(json.dumps({"machine": _machine(), "write_cpu": cpu}, indent=2))
        return

    with tempfile.TemporaryDirectory(prefix="sj-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.scale_only:
            scale = [
                bench_scale(n, args.turns, args.latency, args.concurrency, tmp)
                for n in scale_workers
            ]
            print(json.dumps({"machine": _machine(), "scale_out": scale}, indent=2))
            return
        if args.lag_only:
            lag = [
                bench_lag_steady(args.lag_traces, args.lag_gap, args.latency, tmp, up)
                for up in lag_backend
            ]
            print(json.dumps({"machine": _machine(), "lag_steady": lag}, indent=2))
            return
        result: dict[str, Any] = {"machine": _machine(), **ingest_rounds(args, tmp)}
        if args.ingest_only:
            print(json.dumps(result, indent=2))
            return
        result["lag_steady"] = [
            bench_lag_steady(args.lag_traces, args.lag_gap, args.latency, tmp, up)
            for up in lag_backend
        ]
        result["scale_out"] = [
            bench_scale(n, args.turns, args.latency, args.concurrency, tmp) for n in scale_workers
        ]
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
