"""Fault matrix: what spanjudge loses, repeats and costs the app when things break.

Each row injects one fault on loopback and prints what came of it as one JSON document:

- ``judge``: the judge answers 429 (Retry-After), 500, refuses connections, hangs past the
  timeout, or returns truncated JSON, wrong keys or a refusal, for a share of its calls. The
  judge runs in its own process; a Monitor evaluates pre-stored agent turns against it.
- ``store``: the app's SQLite file is locked by another process, full ("database or disk is
  full" through SQLite's ``max_page_count``, filled by another connection), or deleted under
  the running app. The app is a separate process calling a traced function at a steady rate;
  the fault is switched on and off in alternating windows, so its latency during the fault is
  read against baseline windows of the same run.
- ``process``: evaluator processes are SIGKILLed at random moments while they evaluate against
  a slow scripted judge; a fresh process finishes.
- ``overload``: the app floods spans far above what a slowed store writes; memory, latency,
  drop counters against produced-minus-stored, and the drain afterwards.
- ``backend``: the OTLP endpoint of the app's exporter and of the score emitter refuses
  connections in alternating windows; app latency, evaluator ticks, re-emitted results.
- ``receiver``: a real ``spanjudge worker`` takes the faults at its receiver and setup: a span
  starting at 2**63 among good ones, a protobuf bomb, late spans, a judge outage longer than
  the old retry window, an empty bearer token, a traces-only backend
  (``_reliability_receiver.py``; with ``--smoke`` only when ``--rows`` names it).

Counts per row: ``expected`` evaluations (stored, sampled agent targets), ``done`` (scored),
``errored`` (an error result), ``lost`` (expected with no result), ``duplicated`` (a target with
more than one result or more than one distinct evaluation span id at the OTLP sink), and
``resent_same_id`` (evaluation spans the sink got again under the same id). App spans the
exporter dropped are ``dropped_spans``, never ``lost``: they were never stored, so nothing
could evaluate them.

Usage::

    python benchmarks/reliability.py [--quick] [--rows judge,store,process,overload,backend,...]
    python benchmarks/reliability.py --smoke     # seconds; tests/benchmarks runs it
    python benchmarks/reliability.py --smoke --rows receiver
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.support.otlp_sink

ANSWER = "Returns are possible within 30 days of delivery."
NO_OPINIONS = {"opinions": []}
RULE = "bias-agent"
OLD = 1_000_000_000.0  # arrival time of filler rows: far older than anything real


# ============================================================================ shared pieces
def machine() -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "commit": commit,
    }


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def change(fault: float, base: float) -> float | None:
    return round(100 * (fault / base - 1), 1) if base else None


def agent_records(n: int, arrival: float) -> list[Any]:
    """``n`` one-span agent turns (the shape ``@observe(kind="agent")`` writes)."""
    from spanjudge._core.span_record import SpanRecord

    records = []
    t = int(arrival * 1e9)
    for i in range(n):
        q = f"Question {i}: can I return my blender after a month?"
        records.append(
            SpanRecord(
                f"{i + 1:032x}",
                f"{i + 1:016x}",
                "invoke_agent support",
                t + i * 1000,
                t + i * 1000 + 900,
                None,
                resource={"service.name": "bench-app"},
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "support",
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": q}]}]
                    ),
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
                    ),
                },
            )
        )
    return records


def make_monitor(store: Any, judge: Any, emitter: Any, sample_rate: float, **opts: Any) -> Any:
    from spanjudge.evaluators._judge.metrics.bias import BiasMetric
    from spanjudge.evaluators._loop.config import MonitorConfig
    from spanjudge.evaluators._loop.monitor import Monitor
    from spanjudge.evaluators._plan.rules import Rule

    rule = Rule(
        BiasMetric(model=judge, include_reason=False),
        target="agent",
        sample_rate=sample_rate,
        name=RULE,
    )
    # the loop's timing lives in one settings object (Monitor(config=...)); short settle,
    # lease and retry delay so the faults' effects show within a row's few seconds
    opts.setdefault("settle_seconds", 0.5)
    opts.setdefault("lease_seconds", 5.0)
    opts.setdefault("retry_delay_seconds", 1.0)
    config = MonitorConfig(retention_seconds=None, **opts)
    return Monitor([rule], store=store, emitter=emitter, config=config)


def otlp_emitter(url: str) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from spanjudge.exporters._emit.emitter import ScoreEmitter

    return ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=url, timeout=2))


class Sink:
    """Evaluation spans received at an OTLP/HTTP sink on a fixed port that can go down and
    come back (tests/support/otlp_sink.py's receiver, restarted on the same port)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or closed_port()
        self.spans: list[Any] = []
        self._sink: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def up(self) -> None:
        from http.server import ThreadingHTTPServer

        from tests.support.otlp_sink import OtlpSink

        if self._sink is not None:
            return
        sink = OtlpSink()
        handler = sink._server.RequestHandlerClass
        sink._server.server_close()
        sink._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        sink._thread = threading.Thread(target=sink._server.serve_forever, daemon=True)
        sink.spans = self.spans  # one list across restarts
        sink.__enter__()
        self._sink = sink

    def down(self) -> None:
        if self._sink is not None:
            self._sink.__exit__()
            self._sink = None

    def evaluation_spans(self) -> list[Any]:
        return [s for s in list(self.spans) if s.name.startswith("evaluation ")]


def judge_process(fault: str = "none", every: int = 3, latency: float = 0.0, port: int = 0) -> Any:
    """The scripted judge in its own process; returns (Popen, base_url)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            "judge",
            "--fault",
            fault,
            "--every",
            str(every),
            "--latency",
            str(latency),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    url = proc.stdout.readline().strip() if proc.stdout else ""
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        raise RuntimeError("the scripted judge process did not start")
    return proc, url


def stop_judge(proc: Any) -> int | None:
    """Close the judge's stdin; it prints how many requests it served, then exits."""
    requests = None
    if proc.stdin is not None and proc.stdout is not None:
        proc.stdin.close()
        line = proc.stdout.readline()
        requests = json.loads(line).get("requests") if line.strip() else None
    proc.kill()
    proc.wait(10)
    return requests


def litellm_judge(base_url: str, **opts: Any) -> Any:
    from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge

    return LiteLLMJudge("openai/scripted-judge", api_base=base_url, api_key="sk-bench", **opts)


def count(store: Any, sink: Sink, expected_ids: set[str]) -> dict[str, Any]:
    """done / errored / lost / duplicated / resent_same_id for the targets ``expected_ids``."""
    results = store.results(limit=10**7)
    per_target = Counter(r.target_id for r in results)
    status = {r.target_id: r.status for r in results}
    spans = sink.evaluation_spans()
    ids_per_target: dict[str, set[str]] = {}
    for s in spans:
        target = str(s.attributes.get("spanjudge.evaluation.target_id"))
        ids_per_target.setdefault(target, set()).add(s.span_id)
    distinct = {s.span_id for s in spans}
    duplicated = {t for t, n in per_target.items() if n > 1} | {
        t for t, ids in ids_per_target.items() if len(ids) > 1
    }
    return {
        "expected": len(expected_ids),
        "done": sum(1 for t in expected_ids if status.get(t) == "scored"),
        "errored": sum(1 for t in expected_ids if status.get(t) == "error"),
        "lost": sum(1 for t in expected_ids if t not in status),
        "duplicated": len(duplicated),
        "results_beyond_expected": sum(1 for t in per_target if t not in expected_ids),
        "evaluation_spans_received": len(spans),
        "resent_same_id": len(spans) - len(distinct),
        "results_without_span_at_sink": sum(
            1 for r in results if r.evaluation_span_id not in distinct
        ),
    }


def stored_agent_targets(path: Path, sample_rate: float) -> set[str]:
    """Agent span ids stored in the SQLite file that the rule samples."""
    from spanjudge.evaluators._plan.sampler import is_sampled

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute(
            "SELECT span_id FROM spans"
            " WHERE json_extract(attributes, '$.\"gen_ai.operation.name\"') = 'invoke_agent'"
        ).fetchall()
    finally:
        conn.close()
    return {r[0] for r in rows if is_sampled(RULE, r[0], sample_rate)}


# ============================================================================ role: judge
def role_judge(args: argparse.Namespace) -> None:
    from spanjudge.testing import Fault, ScriptedJudgeServer

    faults = {
        "none": None,
        "429": Fault.status(429, retry_after=0.5),
        "500": Fault.status(500),
        "hang": Fault.hang(30),
        "malformed": Fault.malformed('{"opinions": ["unterminated'),
        "wrong_keys": {"facts": ["The customer is always right."]},
        "refusal": "I'm sorry, but I can't help with that request.",
    }
    fault = faults[args.fault]
    lock = threading.Lock()
    seen = [0]

    def answer(request: Any) -> Any:
        with lock:
            seen[0] += 1
            n = seen[0]
        return fault if fault is not None and n % args.every == 0 else NO_OPINIONS

    server = ScriptedJudgeServer(latency=args.latency, port=args.port).start()
    server.add_rule(answer, schema="Opinions")
    print(server.base_url, flush=True)
    sys.stdin.readline()  # the parent closes stdin (or kills us)
    print(json.dumps({"requests": len(server.requests)}), flush=True)
    os._exit(0)  # a hung request thread must not hold the exit


# ============================================================================ row: judge faults
JUDGE_FAULTS = {
    "judge 429 with Retry-After": "429",
    "judge 500": "500",
    "judge connection refused": "refused",
    "judge hang past the timeout": "hang",
    "judge malformed JSON": "malformed",
    "judge JSON with wrong keys": "wrong_keys",
    "judge refusal text": "refusal",
}


def row_judge(name: str, fault: str, cases: int, tmp: Path) -> dict[str, Any]:
    """``cases`` stored agent turns; every 3rd judge request faults (for ``refused``: the judge
    is down for the first seconds of the run); the monitor must end with one result each."""
    from spanjudge._store.sqlite import SQLiteStore

    path = tmp / f"judge-{fault}.db"
    store = SQLiteStore(path)
    store.write_spans(agent_records(cases, time.time()), now=time.time() - 100)
    sink = Sink()
    sink.up()
    down_seconds = 3.0
    started = time.monotonic()
    port = closed_port()
    late: list[Any] = []  # the judge that comes up after the refused period
    timer = None
    if fault == "refused":
        proc, url = None, f"http://127.0.0.1:{port}/v1"
        timer = threading.Timer(down_seconds, lambda: late.append(judge_process(port=port)[0]))
        timer.start()
    else:
        proc, url = judge_process(fault)
    judge = litellm_judge(url, timeout=2.0)
    mon = make_monitor(store, judge, otlp_emitter(sink.url), 1.0)
    ticks, failed_ticks = 0, 0
    deadline = time.monotonic() + 90
    requests = None
    try:
        while time.monotonic() < deadline:
            try:
                mon.tick()
            except Exception:
                failed_ticks += 1
            ticks += 1
            stats = store.stats(now=time.time())
            if (
                stats.pending == 0
                and stats.leased == 0
                and not store.unemitted_results(outputs=["span"])
            ):
                break
            time.sleep(0.2)
        mon.close()
        elapsed = time.monotonic() - started
        if timer is not None:
            timer.join()
            proc = late[0] if late else None
        if proc is not None:
            requests = stop_judge(proc)
            proc = None
        counts = count(store, sink, {f"{i + 1:016x}" for i in range(cases)})
        errors = Counter(r.error_type for r in store.results(limit=10**6) if r.error_type)
    finally:
        if proc is not None:
            proc.kill()
        sink.down()
        store.close()
    return {
        "fault": name,
        "injected": (
            f"judge down for the first {down_seconds:.0f} s"
            if fault == "refused"
            else "every 3rd judge request"
        ),
        "cases": cases,
        **counts,
        "error_types": dict(errors),
        "judge_requests": requests,
        "ticks": ticks,
        "failed_ticks": failed_ticks,
        "seconds": round(elapsed, 1),
        "expected_outcome": "every case scored once (transient faults retried)",
    }


# ============================================================================ role: app
def role_app(args: argparse.Namespace) -> None:
    """The traced app: calls ``handle`` at a steady rate until the schedule ends, records each
    call's latency with the window it fell in, and prints a JSON summary."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    import spanjudge
    from spanjudge import observe
    from spanjudge._store.sqlite import SQLiteStore
    from spanjudge.exporters._store_spans import StoreSpanExporter

    cfg = json.loads(args.config)
    slow = threading.Event()

    class SlowableStore(SQLiteStore):
        """A store that stops keeping up while ``slow`` is set (overload row)."""

        def write_spans(self, spans: Any, *, now: float | None = None) -> None:
            if slow.is_set():
                time.sleep(cfg["slow_write_seconds"])
            super().write_spans(spans, now=now)

    store = SlowableStore(cfg["store"], pragmas=cfg.get("pragmas") or None)
    exporter = StoreSpanExporter(store)
    spanjudge.configure(
        service_name="bench-app",
        span_processors=[SimpleSpanProcessor(exporter)],
        export_otlp=bool(cfg.get("otlp")),
        otlp_endpoint=cfg.get("otlp"),
    )

    @observe(kind="agent", name="support")
    def handle(question: str) -> str:
        end = time.perf_counter() + 200e-6  # the app's own work: 200 us of CPU
        while time.perf_counter() < end:
            pass
        return ANSWER

    # the schedule starts once this process is set up; the parent switches faults by it
    t0, window, windows = time.time() + 0.5, cfg["window"], cfg["windows"]
    print(json.dumps({"t0": t0}), flush=True)
    guard = cfg["guard"]
    stop = threading.Event()
    flood_calls = [0]

    def phase_of(t: float) -> tuple[int, bool] | None:
        k = int((t - t0) // window)
        if k < 0 or k >= windows or (t - t0) - k * window < guard:
            return None
        return k, k % 2 == 1  # odd windows carry the fault

    flood_per_window: dict[int, int] = {}

    def flood() -> None:  # overload row: a burst of the app's own calls beside the paced ones
        while not stop.is_set():
            handle("flood")
            flood_calls[0] += 1
            p = phase_of(time.time())
            if p is not None:
                flood_per_window[p[0]] = flood_per_window.get(p[0], 0) + 1

    def slow_switch() -> None:  # overload row: the store falls behind in fault windows
        while not stop.is_set():
            p = phase_of(time.time())
            if p is not None:
                if p[1]:
                    slow.set()
                else:
                    slow.clear()
            time.sleep(0.01)

    if cfg.get("flood"):
        threading.Thread(target=flood, daemon=True).start()
        threading.Thread(target=slow_switch, daemon=True).start()

    samples: dict[int, list[float]] = {k: [] for k in range(windows)}
    rss: dict[int, float] = {}
    queued: dict[int, int] = {}
    interval = 1.0 / cfg["rate"]
    next_call = max(time.time(), t0)
    end = t0 + windows * window
    paced = 0
    while True:
        now = time.time()
        if now >= end:
            break
        if next_call > now:
            time.sleep(next_call - now)
        next_call += interval
        start = time.perf_counter_ns()
        handle("Can I return my blender?")
        took = (time.perf_counter_ns() - start) / 1000
        paced += 1
        p = phase_of(time.time())
        if p is not None:
            samples[p[0]].append(took)
            rss[p[0]] = max(rss.get(p[0], 0.0), rss_mb())
            queued[p[0]] = max(queued.get(p[0], 0), exporter.queued)
    stop.set()
    time.sleep(0.05)  # the flood thread's last call
    slow.clear()
    drain_start = time.monotonic()
    drained = exporter.force_flush(60_000)
    drain_seconds = time.monotonic() - drain_start
    out = {
        "produced_spans": paced + flood_calls[0],
        "paced_calls": paced,
        "flood_calls": flood_calls[0],
        "written": exporter.written,
        "dropped": exporter.dropped,
        "queued_at_end": exporter.queued,
        "drained": drained,
        "drain_seconds": round(drain_seconds, 2),
        "windows": [
            {
                "fault": k % 2 == 1,
                "calls": len(samples[k]),
                "p50_us": round(pct(samples[k], 0.5), 1),
                "p99_us": round(pct(samples[k], 0.99), 1),
                "rss_mb": round(rss.get(k, 0.0), 1),
                "max_queued": queued.get(k, 0),
                "flood_calls_per_s": round(flood_per_window.get(k, 0) / (window - guard)),
            }
            for k in range(windows)
        ],
        "baseline_us": [s for k in range(0, windows, 2) for s in samples[k]],
        "fault_us": [s for k in range(1, windows, 2) for s in samples[k]],
        "baseline_halves_us": [
            [s for k in range(0, windows, 4) for s in samples[k]],
            [s for k in range(2, windows, 4) for s in samples[k]],
        ],
        "rss_mb_end": round(rss_mb(), 1),
    }
    print(json.dumps(out), flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # exit warnings of a dead backend
    os._exit(0)  # do not wait on exporters retrying a dead backend


def latency_summary(app: dict[str, Any]) -> dict[str, Any]:
    windows = app["windows"]
    # the median of the windows' p99: one window hit by a hiccup of the machine does not move it
    base_w99 = sorted(w["p99_us"] for w in windows if not w["fault"])
    fault_w99 = sorted(w["p99_us"] for w in windows if w["fault"])
    mid_base, mid_fault = statistics.median(base_w99), statistics.median(fault_w99)
    base, fault = app.pop("baseline_us"), app.pop("fault_us")
    half_a, half_b = app.pop("baseline_halves_us")
    b50, b99, f50, f99 = pct(base, 0.5), pct(base, 0.99), pct(fault, 0.5), pct(fault, 0.99)
    return {
        "baseline_calls": len(base),
        "fault_calls": len(fault),
        "baseline_p50_us": round(b50, 1),
        "fault_p50_us": round(f50, 1),
        "p50_change_pct": change(f50, b50),
        "baseline_p99_us": round(b99, 1),
        "fault_p99_us": round(f99, 1),
        "p99_change_pct": change(f99, b99),
        "window_p99_median_baseline_us": round(mid_base, 1),
        "window_p99_median_fault_us": round(mid_fault, 1),
        "window_p99_median_change_pct": change(mid_fault, mid_base),
        # the same figure between two sets of baseline windows: the noise floor of this run
        "baseline_vs_baseline_p99_pct": change(pct(half_b, 0.99), pct(half_a, 0.99)),
    }


# ============================================================================ rows with the app
class Evaluator:
    """A Monitor ticking in a thread of this (the orchestrating) process, apart from the app."""

    def __init__(self, mon: Any) -> None:
        self.mon = mon
        self.ticks = 0
        self.failed_ticks = 0
        self.reemitted = 0
        self.max_tick_seconds = 0.0
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                report = self.mon.tick()
                self.reemitted += report.reemitted
                self.ticks += 1
            except Exception as exc:
                self.failed_ticks += 1
                self.errors[str(exc)[:60]] += 1
            self.max_tick_seconds = max(self.max_tick_seconds, time.monotonic() - started)
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)


class Fault:
    """Switches a fault on and off (``on()`` / ``off()``); ``close()`` clears it for good."""

    def on(self) -> None:
        pass

    def off(self) -> None:
        pass

    def close(self) -> None:
        self.off()


class LockedByAnotherProcess(Fault):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.holder: subprocess.Popen[str] | None = None

    def on(self) -> None:
        code = (
            "import sqlite3, sys\n"
            f"conn = sqlite3.connect({str(self.path)!r}, isolation_level=None, timeout=30)\n"
            "conn.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n"
            "conn.execute('COMMIT')\n"
        )
        self.holder = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.holder.stdout is not None
        self.holder.stdout.readline()

    def off(self) -> None:
        if self.holder is not None and self.holder.stdin is not None:
            self.holder.stdin.write("\n")
            self.holder.stdin.flush()
            self.holder.wait(30)
            self.holder = None


class DiskFull(Fault):
    """Another connection fills the file up to the app's ``max_page_count`` with old rows;
    the app's writes then fail with "database or disk is full" until they are deleted."""

    def __init__(self, path: Path, max_pages: int) -> None:
        from spanjudge._store.sqlite import SQLiteStore

        self.filler = SQLiteStore(path, pragmas={"max_page_count": max_pages})
        self.n = 0
        self.closed = False

    def _fill(self, attributes: dict[str, str], limit: int) -> None:
        from spanjudge._core.span_record import SpanRecord
        from spanjudge.errors import StoreError

        try:
            for _ in range(limit):
                self.n += 1
                tid, sid = f"f{self.n:031x}", f"f{self.n:015x}"
                record = SpanRecord(tid, sid, "filler", 1, 2, attributes=attributes)
                self.filler.write_spans([record], now=OLD)
        except StoreError:
            pass

    def on(self) -> None:
        self._fill({"filler": "x" * 200_000}, 100_000)
        self._fill({}, 2000)  # then small rows, so no free page is left

    def off(self) -> None:
        if not self.closed:
            self.filler.delete_older_than(OLD + 1)

    def close(self) -> None:
        self.off()
        self.closed = True
        self.filler.close()


class FileDeleted(Fault):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.deletions = 0

    def on(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self.deletions += 1


class BackendDown(Fault):
    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def on(self) -> None:
        self.sink.down()

    def off(self) -> None:
        self.sink.up()


def _count_spans(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute("SELECT count(*) FROM spans WHERE name != 'filler'").fetchone()[0])
    finally:
        conn.close()


def app_row(
    name: str,
    kind: str,
    tmp: Path,
    judge_url: str,
    *,
    window: float,
    windows: int,
    rate: float,
    sample_rate: float,
    catch_up_seconds: float,
) -> dict[str, Any]:
    from spanjudge._store.sqlite import SQLiteStore

    path = tmp / f"app-{kind}.db"
    sink = Sink()
    sink.up()
    pragmas: dict[str, int] = {}
    SQLiteStore(path).close()  # created and migrated before the app and the evaluator open it
    if kind == "disk_full":
        conn = sqlite3.connect(path)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.close()
        pragmas = {"max_page_count": pages + 6000}  # room for this run's rows, little more
    fault: Fault
    if kind == "locked":
        fault = LockedByAnotherProcess(path)
    elif kind == "disk_full":
        fault = DiskFull(path, pragmas["max_page_count"])
    elif kind == "deleted":
        fault = FileDeleted(path)
    elif kind == "backend_down":
        fault = BackendDown(sink)
    else:
        fault = Fault()  # overload: the app process slows its own store
    cfg: dict[str, Any] = {
        "store": str(path),
        "pragmas": pragmas,
        "window": window,
        "windows": windows,
        "guard": min(0.5, window / 5),
        "rate": rate,
    }
    if kind == "backend_down":
        cfg["otlp"] = f"http://127.0.0.1:{sink.port}"
    if kind == "overload":
        cfg["flood"] = True
        cfg["slow_write_seconds"] = 1.0  # per batch of up to 512 spans
    app = subprocess.Popen(
        [sys.executable, __file__, "--role", "app", "--config", json.dumps(cfg)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    judge = litellm_judge(judge_url, timeout=5.0)
    eval_store = SQLiteStore(path, pragmas=pragmas or None)
    evaluator = Evaluator(make_monitor(eval_store, judge, otlp_emitter(sink.url), sample_rate))
    injected: list[float] = []
    caught_up_at = None
    try:
        assert app.stdout is not None
        cfg["t0"] = json.loads(app.stdout.readline())["t0"]
        for k in range(windows):
            wait = cfg["t0"] + k * window - time.time()
            if wait > 0:
                time.sleep(wait)
            started = time.monotonic()
            if k % 2 == 1:
                fault.on()
                injected.append(time.monotonic() - started)
            else:
                fault.off()
        out, _ = app.communicate(timeout=cfg["t0"] + windows * window - time.time() + 120)
        fault.close()
        app_result = json.loads(out)
        # catch up: every stored, sampled target evaluated and its span confirmed
        started = time.monotonic()
        while time.monotonic() - started < catch_up_seconds:
            expected = stored_agent_targets(path, sample_rate)
            done = {r.target_id for r in eval_store.results(limit=10**7)}
            if expected <= done and not eval_store.unemitted_results(outputs=["span"]):
                caught_up_at = time.monotonic() - started
                break
            time.sleep(0.5)
        evaluator.stop()
        evaluator.mon.close()
        expected = stored_agent_targets(path, sample_rate)
        counts = count(eval_store, sink, expected)
    finally:
        if app.poll() is None:
            app.kill()
        fault.close()
        sink.down()
    stored_spans = _count_spans(path)
    eval_store.close()
    app_spans_at_backend = len(sink.spans) - counts["evaluation_spans_received"]
    dropped = sum(app_result["dropped"].values())
    row: dict[str, Any] = {
        "fault": name,
        "cases": app_result["produced_spans"],
        **counts,
        "dropped_spans": app_result["dropped"],
        "app_spans_written": app_result["written"],
        "app_spans_in_final_file": stored_spans,
        "app": latency_summary(app_result),
        "windows": app_result["windows"],
        "evaluator": {
            "ticks": evaluator.ticks,
            "failed_ticks": evaluator.failed_ticks,
            "tick_errors": dict(evaluator.errors),
            "max_tick_seconds": round(evaluator.max_tick_seconds, 2),
            "reemitted": evaluator.reemitted,
            "emitter_dropped": evaluator.mon.emitter.dropped,
            "caught_up_seconds": None if caught_up_at is None else round(caught_up_at, 1),
        },
        "fault_injection_seconds": [round(x, 2) for x in injected],
        "sample_rate": sample_rate,
    }
    if kind == "backend_down":
        row["app_spans_at_backend"] = app_spans_at_backend  # the app's own OTLP exporter
    if isinstance(fault, FileDeleted):
        row["gone_with_deleted_file"] = app_result["produced_spans"] - dropped - stored_spans
        row["deletions"] = fault.deletions
    if kind == "overload":
        produced = app_result["produced_spans"]
        row["overload"] = {
            "produced_spans": produced,
            "flood_calls": app_result["flood_calls"],
            "written": app_result["written"],
            "dropped_total": dropped,
            "stored": stored_spans,
            "dropped_equals_produced_minus_stored": dropped == produced - stored_spans,
            "written_equals_stored": app_result["written"] == stored_spans,
            "max_queued": max(w["max_queued"] for w in app_result["windows"]),
            "rss_mb_per_window": [w["rss_mb"] for w in app_result["windows"]],
            "rss_mb_end": app_result["rss_mb_end"],
            "backlog_drain_seconds": app_result["drain_seconds"],
        }
        flood = [w["flood_calls_per_s"] for w in app_result["windows"]]
        base, slowed = flood[0::2], flood[1::2]
        row["overload"]["flood_calls_per_s_baseline"] = round(sum(base) / len(base))
        row["overload"]["flood_calls_per_s_slowed_store"] = round(sum(slowed) / len(slowed))
        row["overload"]["flood_throughput_change_pct"] = change(sum(slowed), sum(base))
    return row


# ============================================================================ role: evaluator
def role_evaluator(args: argparse.Namespace) -> None:
    """A Monitor in its own process: ``--finish`` ticks until nothing is left and prints what
    it did; otherwise it ticks until killed."""
    from spanjudge._store import open_store

    store = open_store(args.store)
    judge = litellm_judge(args.judge, timeout=10.0)
    mon = make_monitor(store, judge, otlp_emitter(args.sink), 1.0, batch_size=16)
    import litellm  # noqa: F401  (imported on the first judge call otherwise: kills would land in it)

    print("ready", flush=True)
    scored, reemitted = 0, 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        report = mon.tick()
        scored += report.scored
        reemitted += report.reemitted
        if args.finish:
            stats = store.stats(now=time.time())
            if (
                stats.pending == 0
                and stats.leased == 0
                and not store.unemitted_results(outputs=["span"])
            ):
                break
        time.sleep(0.1)
    mon.close()
    print(json.dumps({"scored": scored, "reemitted": reemitted}), flush=True)


def row_kill(cases: int, kills: int, tmp: Path, rng: random.Random) -> dict[str, Any]:
    from spanjudge._store.sqlite import SQLiteStore

    path = tmp / "kill.db"
    store = SQLiteStore(path)
    store.write_spans(agent_records(cases, time.time()), now=time.time() - 100)
    sink = Sink()
    sink.up()
    judge, judge_url = judge_process("none", latency=0.25)
    base = [
        sys.executable,
        __file__,
        "--role",
        "evaluator",
        "--store",
        f"sqlite:///{path}",
        "--sink",
        sink.url,
        "--judge",
        judge_url,
    ]
    delays, results_at_kill = [], []
    started = time.monotonic()
    try:
        for _ in range(kills):
            victim = subprocess.Popen(base, stdout=subprocess.PIPE, text=True, cwd=ROOT)
            assert victim.stdout is not None
            victim.stdout.readline()  # "ready": imported, monitor built
            delay = rng.uniform(0.3, 2.0)
            time.sleep(delay)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(10)
            delays.append(round(delay, 2))
            results_at_kill.append(len(store.results(limit=10**6)))
        heir = subprocess.run([*base, "--finish"], capture_output=True, text=True, cwd=ROOT)
        lines = heir.stdout.splitlines()
        heir_out = json.loads(lines[-1]) if lines else {"error": heir.stderr[-500:]}
        counts = count(store, sink, {f"{i + 1:016x}" for i in range(cases)})
    finally:
        stop_judge(judge)
        sink.down()
        store.close()
    return {
        "fault": "SIGKILL of evaluator processes at random moments",
        "cases": cases,
        **counts,
        "kills": kills,
        "kill_delays_s": delays,
        "results_stored_at_each_kill": results_at_kill,
        "heir": heir_out,
        "seconds": round(time.monotonic() - started, 1),
        "expected_outcome": "one result and one evaluation span id per target",
    }


# ============================================================================ main
ALL_ROWS = "judge,store,process,overload,backend,receiver"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: two judge faults and one SIGKILL on 6 cases, no app rows "
        "(checks the script runs; lost and duplicated must still be 0)",
    )
    parser.add_argument("--rows", default=ALL_ROWS)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--role", default="main")
    parser.add_argument("--fault", default="none")
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--config", default="{}")
    parser.add_argument("--store", default="")
    parser.add_argument("--sink", default="")
    parser.add_argument("--judge", default="")
    parser.add_argument("--finish", action="store_true")
    args = parser.parse_args()
    if args.role == "judge":
        return role_judge(args)
    if args.role == "app":
        return role_app(args)
    if args.role == "evaluator":
        return role_evaluator(args)

    import logging

    logging.disable(logging.WARNING)  # faults are the point here; their warnings are noise
    import litellm  # noqa: F401  (now, not on the first judge call in the middle of a row)

    rows = set(args.rows.split(","))
    judge_faults = JUDGE_FAULTS
    if args.smoke:
        # the receiver rows run real worker processes: in a smoke run only when asked for
        rows &= {"judge", "process"} | ({"receiver"} if args.rows != ALL_ROWS else set())
        judge_faults = {k: v for k, v in JUDGE_FAULTS.items() if v in ("500", "malformed")}
    rng = random.Random(args.seed)
    quick = args.quick
    window, windows = (1.0, 4) if quick else (2.5, 10)
    app_opts: dict[str, Any] = {"window": window, "windows": windows, "rate": 300.0}
    app_opts["catch_up_seconds"] = 40.0
    result: dict[str, Any] = {
        "machine": machine(),
        "quick": quick,
        "smoke": args.smoke,
        "rows": [],
    }
    judge_cases = 6 if args.smoke else 12 if quick else 30
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if "judge" in rows:
            for name, fault in judge_faults.items():
                result["rows"].append(row_judge(name, fault, judge_cases, tmp))
        if rows & {"store", "overload", "backend"}:
            judge, judge_url = judge_process("none")
            try:
                # the same schedule with nothing switched: how far apart the two phases land
                # on this machine when there is no fault at all
                app_rows = [("control: no fault (same schedule)", "control", 0.05)]
                if "store" in rows:
                    app_rows += [
                        ("store locked by another process", "locked", 0.05),
                        ("store disk full", "disk_full", 0.05),
                        ("store file deleted", "deleted", 0.05),
                    ]
                if "overload" in rows:
                    app_rows.append(("overload: span flood into a slowed store", "overload", 0.002))
                if "backend" in rows:
                    app_rows.append(("OTLP backend refusing connections", "backend_down", 0.05))
                for name, kind, rate in app_rows:
                    row = app_row(name, kind, tmp, judge_url, sample_rate=rate, **app_opts)
                    result["rows"].append(row)
            finally:
                stop_judge(judge)
        if "process" in rows:
            kills, cases = (1, 6) if args.smoke else (3, 40) if quick else (6, 120)
            result["rows"].append(row_kill(cases, kills, tmp, rng))
        if "receiver" in rows:
            from _reliability_receiver import receiver_rows

            size = "smoke" if args.smoke else "quick" if quick else "full"
            result["rows"].extend(receiver_rows(size))
    result["seconds"] = round(time.monotonic() - started, 1)
    result["summary"] = [
        {
            "fault": r["fault"],
            "cases": r["cases"],
            "expected": r["expected"],
            "done": r["done"],
            "errored": r["errored"],
            "lost": r["lost"],
            "duplicated": r["duplicated"],
            "resent_same_id": r["resent_same_id"],
            "dropped_spans": sum(r.get("dropped_spans", {}).values()),
            "app_p50_change_pct": r.get("app", {}).get("p50_change_pct"),
            "app_p99_change_pct": r.get("app", {}).get("p99_change_pct"),
            "app_window_p99_median_change_pct": r.get("app", {}).get(
                "window_p99_median_change_pct"
            ),
            "app_baseline_vs_baseline_p99_pct": r.get("app", {}).get(
                "baseline_vs_baseline_p99_pct"
            ),
        }
        for r in result["rows"]
    ]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
