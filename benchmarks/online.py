"""Online evaluation figures, printed as one JSON document.

- ``store_write``: spans/s through the store exporter into SQLite (runs benchmarks/store_write.py);
- ``throughput``: cases/s of the monitor against the scripted judge on 127.0.0.1 at a fixed
  latency and concurrency, next to the bound ``concurrency / (judge calls per case x latency)``;
- ``pipeline_overhead``: milliseconds per case of everything but the judge (store reads, case
  rebuild, metric engine, result write, emission), measured with an in-process judge that
  answers at once;
- ``memory``: RSS of the evaluating process as the store grows to 100k spans (planning reads
  every trace; a sample of them is evaluated), to show it stays flat.

Usage::

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python benchmarks/online.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from spanjudge._core.span_record import SpanRecord
from spanjudge._store import open_store
from spanjudge.evaluators._judge.judges.base import Judge, Usage
from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter

HERE = Path(__file__).resolve().parent
JUDGE_PROCESS = """
import sys, time
from spanjudge.testing import ScriptedJudgeServer
server = ScriptedJudgeServer(latency=float(sys.argv[1])).start()
server.add_rule({"opinions": []}, schema="Opinions")
print(server.base_url, flush=True)
time.sleep(3600)
"""
NOW = 1_800_000_000.0


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def trace_spans(i: int) -> list[SpanRecord]:
    """One agent turn: agent root, retriever, LLM (the shapes @observe writes)."""
    trace_id = f"{i + 1:032x}"
    root, ret, llm = f"{3 * i + 1:016x}", f"{3 * i + 2:016x}", f"{3 * i + 3:016x}"
    t = int(NOW * 1e9) + i * 1000
    q = f"Question {i}: can I return my blender after a month?"
    a = "Returns are possible within 30 days of delivery for a full refund."
    user = json.dumps([{"role": "user", "parts": [{"type": "text", "content": q}]}])
    out = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": a}]}])
    resource = {"service.name": "bench"}
    return [
        SpanRecord(
            trace_id,
            root,
            "invoke_agent support",
            t,
            t + 900,
            None,
            resource=resource,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support",
                "gen_ai.input.messages": user,
                "gen_ai.output.messages": out,
            },
        ),
        SpanRecord(
            trace_id,
            ret,
            "retrieval kb",
            t + 10,
            t + 100,
            root,
            resource=resource,
            attributes={
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.query.text": q,
                "spanjudge.retrieval.documents.content": json.dumps([a]),
            },
        ),
        SpanRecord(
            trace_id,
            llm,
            "chat m",
            t + 200,
            t + 800,
            root,
            resource=resource,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.input.messages": user,
                "gen_ai.output.messages": out,
            },
        ),
    ]


class InstantJudge(Judge):
    """Answers in-process at once: what is left of a case's time is the pipeline's own."""

    model_name = "instant"

    def _answer(self, schema: type[BaseModel]) -> str:
        return '{"opinions": []}' if schema.__name__ == "Opinions" else '{"reason": "ok"}'

    def _complete(self, messages: Any, schema: type[BaseModel]) -> tuple[str, Usage]:
        return self._answer(schema), Usage(1, 1, None, 1)

    async def _a_complete(self, messages: Any, schema: type[BaseModel]) -> tuple[str, Usage]:
        return self._answer(schema), Usage(1, 1, None, 1)


def run_monitor(
    judge: Any, traces: int, *, concurrency: int, sample_rate: float = 1.0, store_dir: str
) -> dict[str, Any]:
    store = open_store(f"sqlite:///{store_dir}/bench-{time.monotonic_ns()}.db")
    for start in range(0, traces, 1000):
        batch = [s for i in range(start, min(traces, start + 1000)) for s in trace_spans(i)]
        store.write_spans(batch, now=NOW)
    rule = Rule(
        BiasMetric(model=judge, include_reason=False), target="agent", sample_rate=sample_rate
    )
    emitter = ScoreEmitter(span_exporter=InMemorySpanExporter())
    monitor = Monitor(
        [rule],
        store=store,
        emitter=emitter,
        clock=lambda: NOW + 11,
        config=MonitorConfig(
            concurrency=concurrency, settle_seconds=10, retention_seconds=None, batch_size=256
        ),
    )
    rss_before = rss_mb()
    started = time.perf_counter()
    report = monitor.tick()
    elapsed = time.perf_counter() - started
    emitter.shutdown()
    store.close()
    return {
        "traces": traces,
        "scored": report.scored,
        "errors": report.errors,
        "seconds": round(elapsed, 3),
        "rss_mb_before": round(rss_before, 1),
        "rss_mb_after": round(rss_mb(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--latency", type=float, nargs="+", default=[0.1, 0.5])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: tiny sizes at one 0.02 s latency (checks the script runs)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.latency = [0.02]
    cases = 20 if args.smoke else 80 if args.quick else 400
    result: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor(),
        },
    }

    store_write = subprocess.run(
        [
            sys.executable,
            str(HERE / "store_write.py"),
            "--spans",
            "1000" if args.smoke else "20000" if args.quick else "50000",
            "--no-postgres",
        ],
        capture_output=True,
        text=True,
    )
    try:
        result["store_write"] = json.loads(store_write.stdout)
    except json.JSONDecodeError:
        result["store_write"] = {"error": store_write.stderr[-500:]}

    with tempfile.TemporaryDirectory() as tmp:
        # throughput against the scripted judge over HTTP: 1 judge call per case (no opinions)
        result["throughput"] = []
        for latency in args.latency:
            # the judge runs in its own process, as a remote judge would: it must not share
            # this process's CPU (GIL) with the loop being measured
            server = subprocess.Popen(
                [sys.executable, "-c", JUDGE_PROCESS, str(latency)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                base_url = server.stdout.readline().strip() if server.stdout else ""
                if not base_url.startswith("http://127.0.0.1:"):
                    raise RuntimeError("the scripted judge process did not start")
                judge = LiteLLMJudge(
                    "openai/scripted-judge",
                    api_base=base_url,
                    api_key="x",
                    max_concurrency=args.concurrency,
                    timeout=30,
                )
                warm_up = 4 if args.smoke else 16
                run_monitor(judge, warm_up, concurrency=args.concurrency, store_dir=tmp)
                n = min(cases, int(8 * args.concurrency / latency))
                run = run_monitor(judge, n, concurrency=args.concurrency, store_dir=tmp)
            finally:
                server.kill()
            bound = args.concurrency / (1 * latency)
            achieved = run["scored"] / run["seconds"]
            result["throughput"].append(
                {
                    "cases": n,
                    "latency_s": latency,
                    "concurrency": args.concurrency,
                    "judge_calls_per_case": 1,
                    "cases_per_s": round(achieved, 2),
                    "bound_cases_per_s": round(bound, 2),
                    "share_of_bound": round(achieved / bound, 3),
                    "errors": run["errors"],
                }
            )

        instant = InstantJudge(max_concurrency=args.concurrency)
        warm_up = 5 if args.smoke else 50
        run_monitor(instant, warm_up, concurrency=args.concurrency, store_dir=tmp)
        over = run_monitor(instant, cases, concurrency=args.concurrency, store_dir=tmp)
        result["pipeline_overhead"] = {
            "cases": cases,
            "ms_per_case": round(1000 * over["seconds"] / max(1, over["scored"]), 3),
            "includes": "store reads, rebuild, metric engine, result write, emission queue",
        }

        memory = []
        sizes = [200] if args.smoke else [3000, 10000] if args.quick else [5000, 15000, 33334]
        for traces in sizes:
            run = run_monitor(
                instant, traces, concurrency=args.concurrency, sample_rate=0.05, store_dir=tmp
            )
            memory.append(
                {
                    "spans": traces * 3,
                    "evaluated": run["scored"],
                    "rss_mb_after_tick": run["rss_mb_after"],
                    "tick_seconds": run["seconds"],
                }
            )
        result["memory"] = memory
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
