"""Planning throughput: settled traces planned per second, in process, on demo traces.

A SQLite store (a temporary file, as the worker's default) is filled with ``--traces`` demo agent
traces (the demo app's single turns, traced by the real tracer, ids remapped so every trace is
new; about 3.25 spans per trace), all settled; then ``Planner.plan`` plans the whole backlog as
a tick would, and the time it takes gives traces/s. Three rule sets: the bias rule on agent
spans sampling 3.25% of the turns (the memory run of ``scale.py``), the same rule on every turn
(the lag run), and the 3.25% rule beside a conversation rule (the demo's single turns carry no
conversation id, so that rule finds none in any trace: the coverage path, which reads every
turn's conversation id and every span's kind).

``--compare PYTHON`` alternates runs of this script under the current interpreter (A) and
another one (B, e.g. the virtualenv of a worktree at an older commit), ``--rounds`` times each
(ABAB...), and prints per-side medians and ranges with the load average, so noisy machines can
still be read side by side.

    python benchmarks/planning.py [--traces 20000] [--compare ../base/.venv/bin/python]
    python benchmarks/planning.py --smoke        # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


RULE_SETS = (
    ("sampled_3.25pct", 0.0325, False),
    ("every_turn", 1.0, False),
    ("sampled_3.25pct_and_conversation_rule", 0.0325, True),
)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def demo_records(traces: int) -> list[Any]:
    """``traces`` demo agent traces as span records (20 turns traced, then copied with new ids)."""
    from worker import demo_turns_request, remapped

    from spanjudge._receive.decode import records_from_request

    base = demo_turns_request(20)
    per_request = len(
        {s.trace_id for rs in base.resource_spans for ss in rs.scope_spans for s in ss.spans}
    )
    records: list[Any] = []
    for i in range(-(-traces // per_request)):
        records.extend(records_from_request(remapped(base, 0x100000 + i)))
    return records


def run_once(traces: int) -> dict[str, Any]:
    """One store per rule set, filled then planned; traces planned per second."""
    from spanjudge._store import open_store
    from spanjudge.evaluators._judge.metrics.bias import BiasMetric
    from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
    from spanjudge.evaluators._plan.planner import Planner, TickReport
    from spanjudge.evaluators._plan.rules import Rule

    records = demo_records(traces)
    out: dict[str, Any] = {"spans": len(records)}
    for label, rate, conversation in RULE_SETS:
        rules = [
            Rule(BiasMetric(model="openai/scripted"), target="agent", name="bias", sample_rate=rate)
        ]
        if conversation:
            metric = TopicAdherenceMetric(relevant_topics=["orders"], model="openai/scripted")
            rules.append(Rule(metric, target="conversation", name="topics"))
        with tempfile.TemporaryDirectory(prefix="sj-plan-") as tmp:
            store = open_store(f"sqlite:///{tmp}/plan.db")
            now = time.time()
            for start in range(0, len(records), 2000):
                store.write_spans(records[start : start + 2000], now=now - 600)
            planner = Planner({r.name: r for r in rules}, store, clock=time.time)
            report = TickReport()
            started = time.perf_counter()
            planner.plan(report, now=now, settle_seconds=1.0, idle_seconds=300.0)
            elapsed = time.perf_counter() - started
            stats = store.stats(now=now)
            store.close()
        out[label] = {
            "traces_planned": report.planned_traces,
            "conversations_planned": report.planned_conversations,
            "jobs_enqueued": report.jobs_enqueued,
            "unplanned_left": stats.unplanned_traces,
            "seconds": round(elapsed, 3),
            "traces_per_second": round(report.planned_traces / elapsed, 1),
        }
    return out


def compare(other: str, rounds: int, traces: int) -> dict[str, Any]:
    """ABAB... runs of this script under this interpreter (A) and ``other`` (B)."""
    sides = {"A": sys.executable, "B": other}
    runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    loads = [_load()]
    for _ in range(rounds):
        for side, python in sides.items():
            done = subprocess.run(
                [python, __file__, "--traces", str(traces)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            )
            runs[side].append(json.loads(done.stdout))
            loads.append(_load())
    summary: dict[str, Any] = {}
    for side, results in runs.items():
        summary[side] = {"python": sides[side], "commit": results[0]["commit"]}
        for label, _, _ in RULE_SETS:
            rates = [r[label]["traces_per_second"] for r in results]
            summary[side][label] = {
                "median_traces_per_second": round(statistics.median(rates), 1),
                "range": [min(rates), max(rates)],
                "runs": rates,
                "jobs_enqueued": results[0][label]["jobs_enqueued"],
                "conversations_planned": results[0][label]["conversations_planned"],
            }
    return {"rounds": rounds, "traces": traces, "load_averages": loads, "sides": summary}


def _commit() -> str:
    import spanjudge

    root = Path(spanjudge.__file__).resolve().parents[1]
    return (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root
        ).stdout.strip()
        + f" ({root})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--compare", help="another Python to alternate with (B)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: 200 traces (checks the script runs)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.traces = 200
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if args.compare:
        result = compare(args.compare, args.rounds, args.traces)
    else:
        load = _load()
        result = {"commit": _commit(), "load_before": load, **run_once(args.traces)}
        result["load_after"] = _load()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
