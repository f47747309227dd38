"""Per-call overhead of spanjudge ``@observe`` against raw OpenTelemetry and peer tracers.

Prints ONE JSON document on stdout (progress goes to stderr). What it measures, each as the
median over rounds of the per-call microseconds of N calls of the same trivial function
(``benchmarks/peers/_harness.py``: one string in, the same string out):

* spanjudge, in the project venv, three processes: SDK provider with a BatchSpanProcessor,
  SDK provider with a SimpleSpanProcessor (both into an in-memory counting exporter), and the
  API's no-op provider. In each: undecorated, raw ``tracer.start_as_current_span``, a raw span
  with the same GenAI attributes set by hand, and ``@observe`` of every kind with content
  capture on; also a tool and a retriever called by keyword and inside ``conversation()``
  (``ratios.<mode>.shapes``).
* peers, each in its own venv (``benchmarks/setup_peers.sh``): Langfuse ``@observe``,
  OpenLLMetry (traceloop-sdk) ``@workflow`` / ``@task``, deepeval ``@observe``; each runner
  also times the undecorated function and a raw OTel span in its own process.

Every runner is a long-lived subprocess; the orchestrator asks each for one round in turn
(rotating the order), so the runners' measurements interleave (ABAB) instead of each owning
its own stretch of a noisy shared machine. Within a round, every decorated variant is timed
right after a fresh undecorated baseline and its overhead is the difference (paired).

Example::

    bash benchmarks/setup_peers.sh          # once: peer venvs under bench-envs/
    .venv/bin/python benchmarks/overhead.py --quick
    .venv/bin/python benchmarks/overhead.py --smoke          # seconds; tests/benchmarks runs it
    .venv/bin/python benchmarks/overhead.py --n 20000 --repeats 5 > overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_DIR = HERE / "peers"
GOAL_RATIO = 1.3
# Every kind @observe has (spanjudge.tracer._attributes.KINDS); run_spanjudge.py times each.
OBSERVE_KINDS = ("agent", "llm", "retriever", "tool", "chain")
# The other call shapes run_spanjudge.py times (peers/run_spanjudge.py SHAPE_KINDS): an argument
# by keyword and a call inside conversation(); reported beside the kinds, with the same goal.
OBSERVE_SHAPES = tuple(
    f"{kind}_{shape}"
    for kind in ("tool", "retriever")
    for shape in ("by_keyword", "in_conversation")
)

# name -> (runner script, extra args, venv name under bench-envs or None for this interpreter)
SPANJUDGE_RUNNERS: dict[str, tuple[str, list[str]]] = {
    "spanjudge_batch": ("run_spanjudge.py", ["--processor", "batch"]),
    "spanjudge_simple": ("run_spanjudge.py", ["--processor", "simple"]),
    "spanjudge_noop": ("run_spanjudge.py", ["--processor", "noop"]),
}
PEER_RUNNERS: dict[str, str] = {
    "langfuse": "run_langfuse.py",
    "traceloop": "run_traceloop.py",
    "deepeval": "run_deepeval.py",
}
# What each peer's decorated variants stand for, to pair them with an @observe kind.
PEER_LLM_VARIANTS: dict[str, list[str]] = {
    "langfuse": ["langfuse_observe", "langfuse_observe_generation", "langfuse_observe_retriever"],
    "traceloop": ["traceloop_workflow", "traceloop_task"],
    "deepeval": ["deepeval_observe_llm", "deepeval_observe_retriever"],
}
# Environment for every child: nothing may reach the network, no telemetry phoning home.
OFFLINE_ENV: dict[str, str] = {
    "LANGFUSE_HOST": "http://127.0.0.1:9",
    "LANGFUSE_BASE_URL": "http://127.0.0.1:9",
    "TRACELOOP_BASE_URL": "http://127.0.0.1:9",
    "TRACELOOP_TELEMETRY": "false",
    "TRACELOOP_TRACE_CONTENT": "true",
    "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
    "DEEPEVAL_UPDATE_WARNING_OPT_IN": "NO",
    "DEEPEVAL_GRPC_LOGGING": "NO",
    "ERROR_REPORTING": "NO",
    "OTEL_SDK_DISABLED": "false",
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "POSTHOG_DISABLED": "1",
    "DO_NOT_TRACK": "1",
    "ANONYMIZED_TELEMETRY": "false",
    "HF_HUB_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PYTHONUNBUFFERED": "1",
}


def log(message: str) -> None:
    print(f"[overhead] {message}", file=sys.stderr, flush=True)


@dataclass
class Child:
    """One runner subprocess and what it reported."""

    name: str
    argv: list[str]
    n: int
    proc: subprocess.Popen[str] | None = None
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    stderr_path: Path | None = None
    status: str = "pending"
    error: str | None = None
    ready: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] = field(default_factory=dict)

    def start(self, env: dict[str, str], stderr_dir: Path) -> None:
        self.stderr_path = stderr_dir / f"{self.name}.stderr.log"
        err: IO[str] = open(self.stderr_path, "w")  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=str(ROOT),
            bufsize=1,
        )
        err.close()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self, timeout: float) -> dict[str, Any]:
        """Next protocol message; raises ``RuntimeError`` on exit or timeout."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"no answer within {timeout:.0f}s") from None
        if line is None:
            code = self.proc.wait(timeout=10) if self.proc else None
            raise RuntimeError(f"runner exited (code {code})")
        message: dict[str, Any] = json.loads(line)
        if message.get("event") == "error":
            raise RuntimeError(
                f"{message.get('stage')}: {message.get('error')}\n"
                f"{message.get('traceback', '')}".strip()
            )
        return message

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def fail(self, status: str, error: str) -> None:
        self.status, self.error = status, error
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stderr_tail(self, lines: int = 15) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "loadavg_at_start": list(os.getloadavg()),
    }


def source_state() -> dict[str, Any]:
    """Which tracer code was measured: the commit, and whether tracer/ had uncommitted edits."""

    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--", "tracer", "spanjudge")
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "tracer_uncommitted_changes": None if dirty is None else bool(dirty),
    }


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The runners' own summary (one definition of the statistics, in the harness)."""
    import importlib

    if str(PEERS_DIR) not in sys.path:
        sys.path.insert(0, str(PEERS_DIR))
    harness = importlib.import_module("_harness")
    result: dict[str, Any] = harness.summarize(rounds)
    return result


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 3)


def overhead_of(summary: dict[str, Any], variant: str) -> float | None:
    entry = summary.get(variant)
    return None if entry is None else entry.get("overhead_us")


def build_children(args: argparse.Namespace) -> list[Child]:
    children: list[Child] = []
    python = sys.executable
    for name, (script, extra) in SPANJUDGE_RUNNERS.items():
        if name == "spanjudge_simple" and (args.quick or args.smoke):
            continue
        children.append(
            Child(name, [python, str(PEERS_DIR / script), *extra, "--n", str(args.n)], args.n)
        )
    for peer in args.peers:
        venv_python = Path(args.envs) / peer / "bin" / "python"
        n = min(args.n, args.peer_n)
        child = Child(
            peer, [str(venv_python), str(PEERS_DIR / PEER_RUNNERS[peer]), "--n", str(n)], n
        )
        # setup_peers.sh writes the marker only after a successful install.
        if not venv_python.exists() or not (Path(args.envs) / peer / ".spanjudge-spec").exists():
            log_path = Path(args.envs) / f"{peer}.install.log"
            detail = ""
            if log_path.exists():
                detail = "\n".join(log_path.read_text(errors="replace").splitlines()[-10:])
            child.status = "not_installed"
            child.error = (
                f"no finished venv at {venv_python.parent.parent}; run "
                f"`bash benchmarks/setup_peers.sh {peer}`"
                + (f"; last install log lines:\n{detail}" if detail else "")
            )
        children.append(child)
    return children


def run(args: argparse.Namespace) -> dict[str, Any]:
    info = machine_info()
    info["spanjudge_source"] = source_state()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    env.update(OFFLINE_ENV)
    # Runners import the project from the work tree even when it is not installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    stderr_dir = Path(args.log_dir)
    stderr_dir.mkdir(parents=True, exist_ok=True)

    children = build_children(args)
    live = [c for c in children if c.status == "pending"]
    for child in live:
        log(f"starting {child.name}")
        child.start(env, stderr_dir)
    for child in live:
        try:
            child.ready = child.read(args.start_timeout)
            child.status = "running"
        except Exception as exc:
            child.fail("error", f"could not start: {exc}\n{child.stderr_tail()}".strip())
            log(f"{child.name}: {child.error}")
    live = [c for c in children if c.status == "running"]

    started = time.monotonic()
    for r in range(args.repeats):
        shift = r % max(len(live), 1)
        order = live[shift:] + live[:shift]
        for child in order:
            if child.status != "running":
                continue
            child.send({"cmd": "run", "n": child.n, "round": r, "slices": args.slices})
            try:
                message = child.read(args.round_timeout)
            except Exception as exc:
                child.fail("error", f"round {r}: {exc}\n{child.stderr_tail()}".strip())
                log(f"{child.name}: {child.error}")
                continue
            child.rounds.append({"us": message["us"], "overhead_us": message["overhead_us"]})
        log(f"round {r + 1}/{args.repeats} done ({time.monotonic() - started:.0f}s)")

    for child in children:
        if child.status != "running":
            continue
        try:
            child.send({"cmd": "quit"})
            child.done = child.read(args.round_timeout).get("shutdown", {})
            child.status = "ok"
            assert child.proc is not None
            child.proc.wait(timeout=30)
        except Exception as exc:
            child.fail("error", f"shutdown: {exc}\n{child.stderr_tail()}".strip())

    info["loadavg_at_end"] = list(os.getloadavg())
    info["packages"] = {
        c.name: c.ready.get("info", {}).get("packages") for c in children if c.ready
    }
    return report(args, info, children)


def report(args: argparse.Namespace, info: dict[str, Any], children: list[Child]) -> dict[str, Any]:
    by_name = {c.name: c for c in children}
    runs: dict[str, Any] = {}
    for child in children:
        entry: dict[str, Any] = {"status": child.status}
        if child.error:
            entry["error"] = child.error
        if child.ready:
            entry["info"] = child.ready.get("info", {})
            if child.ready.get("errors"):
                entry["variant_errors"] = child.ready["errors"]
        if child.rounds:
            entry["n"] = child.n
            entry["rounds"] = len(child.rounds)
            entry["variants"] = summarize(child.rounds)
        if child.done:
            entry["shutdown"] = child.done
            calls = child.done.get("calls_by_variant", {})
            exported = child.done.get("spans_exported")
            if child.name.startswith("spanjudge_") and exported is not None:
                # Every non-baseline variant of an SDK runner makes exactly one span per call;
                # fewer exported spans would mean the batch queue dropped some.
                expected = sum(v for k, v in calls.items() if k != "undecorated")
                entry["spans_expected"] = expected
                entry["spans_dropped"] = expected - exported
        runs[child.name] = entry

    def variants(name: str) -> dict[str, Any]:
        child = by_name.get(name)
        return summarize(child.rounds) if child and child.rounds else {}

    def round_ratios(name: str, variant: str) -> list[float]:
        """observe/raw within each round: both saw the same minutes of machine load."""
        child = by_name.get(name)
        out = []
        for r in child.rounds if child else []:
            a, b = r["overhead_us"].get(variant), r["overhead_us"].get("raw_otel")
            if a is not None and b:
                out.append(round(a / b, 3))
        return out

    def entry(
        mode: str, summary: dict[str, Any], raw: float | None, variant: str
    ) -> dict[str, Any]:
        over = overhead_of(summary, variant)
        measured = ratio(over, raw)
        per_round = round_ratios(f"spanjudge_{mode}", variant)
        return {
            "observe_overhead_us": over,
            "raw_otel_overhead_us": raw,
            "observe_over_raw_otel": measured,
            "per_round_ratios": per_round,
            # paired: a round's two figures saw the same load; observe_over_raw_otel divides
            # two medians over rounds, which may come from different rounds
            "median_of_round_ratios": statistics.median(per_round) if per_round else None,
            "goal": GOAL_RATIO,
            "meets_goal": None if measured is None else measured <= GOAL_RATIO,
        }

    ratios: dict[str, Any] = {}
    for mode in ("batch", "simple", "noop"):
        summary = variants(f"spanjudge_{mode}")
        if not summary:
            continue
        raw = overhead_of(summary, "raw_otel")
        ratios[mode] = {
            kind: entry(mode, summary, raw, f"observe_{kind}") for kind in OBSERVE_KINDS
        }
        ratios[mode]["hand_written_genai_over_raw_otel"] = ratio(
            overhead_of(summary, "raw_otel_genai_attrs"), raw
        )
        ratios[mode]["shapes"] = {
            shape: entry(mode, summary, raw, f"observe_{shape}") for shape in OBSERVE_SHAPES
        }

    # Against peers: absolute overheads (same machine, same rounds) and, because each peer runs
    # its own OpenTelemetry version, also normalised by the raw span measured in its process.
    sj = variants("spanjudge_batch")
    sj_llm = overhead_of(sj, "observe_llm")
    sj_raw = overhead_of(sj, "raw_otel")
    vs_peers: dict[str, Any] = {}
    for peer in args.peers:
        peer_child = by_name.get(peer)
        if peer_child is None or not peer_child.rounds:
            vs_peers[peer] = {
                "status": peer_child.status if peer_child else "missing",
                "error": peer_child.error if peer_child else None,
            }
            continue
        summary = summarize(peer_child.rounds)
        peer_raw = overhead_of(summary, "raw_otel")
        per_variant: dict[str, Any] = {}
        for variant in PEER_LLM_VARIANTS[peer]:
            peer_over = overhead_of(summary, variant)
            if peer_over is None:
                continue
            per_variant[variant] = {
                "peer_overhead_us": peer_over,
                "observe_llm_overhead_us": sj_llm,
                "observe_over_peer": ratio(sj_llm, peer_over),
                "observe_lower": None if sj_llm is None else sj_llm < peer_over,
                "peer_over_its_raw_otel": ratio(peer_over, peer_raw),
                "observe_over_its_raw_otel": ratio(sj_llm, sj_raw),
            }
        vs_peers[peer] = {"status": peer_child.status, "variants": per_variant}
    ratios["vs_peers"] = vs_peers

    return {
        "benchmark": "spanjudge tracer per-call overhead",
        "unit": "microseconds per call",
        "method": {
            "function": "trivial(question: str) -> str, returns its argument",
            "n_spanjudge": args.n,
            "n_peers": min(args.n, args.peer_n),
            "repeats": args.repeats,
            "statistic": "median over rounds; overhead = decorated minus the undecorated "
            "batch timed right before it in the same process (paired), median over rounds",
            "interleaving": "one round per runner in turn, order rotated per round; "
            "variants rotated within a runner's round",
            "timed_region": "N calls plus the runner's force_flush (export of those spans)",
            "exporters": "in-memory counting exporter everywhere; no network",
            "primary_setup": "spanjudge_batch: SDK TracerProvider + BatchSpanProcessor "
            "(SDK defaults) -> counting in-memory exporter; raw OTel uses the same provider",
            "quick": args.quick,
            "smoke": args.smoke,
        },
        "machine": info,
        "ratios": ratios,
        "runs": runs,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="calls per timed batch")
    parser.add_argument(
        "--peer-n",
        type=int,
        default=5000,
        help="cap on calls per batch for peers (they are 10-100x slower)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="rounds (>= 5 for a real run)")
    parser.add_argument(
        "--slices", type=int, default=10, help="interleaved chunks per round inside each runner"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: n=2000, peer-n=500, 3 rounds, no SimpleSpanProcessor run",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: n=200, 1 round of 2 slices, batch and no-op runners only, no peers "
        "(checks the script still runs and prints its JSON; the figures mean nothing)",
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        default=list(PEER_RUNNERS),
        choices=list(PEER_RUNNERS),
        help="peers to include (default: all)",
    )
    parser.add_argument("--no-peers", action="store_true", help="spanjudge only")
    parser.add_argument(
        "--envs",
        default=str(ROOT / "bench-envs"),
        help="folder of the peer venvs made by setup_peers.sh",
    )
    parser.add_argument(
        "--log-dir",
        default=str(ROOT / "bench-envs" / "logs"),
        help="where each runner's stderr is kept",
    )
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--round-timeout", type=float, default=600.0)
    parser.add_argument("--output", help="also write the JSON document to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.peer_n, args.repeats = 2000, 500, 3
    if args.smoke:
        args.n, args.repeats, args.slices, args.no_peers = 200, 1, 2, True
    if args.no_peers:
        args.peers = []
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
