"""Agents: how many owed agent evaluations spanjudge scores with the right trajectory, per
framework.

For every recording under ``tests/interop/fixtures/agents/`` (the agent scenario of
``tests/interop/record/agent_scenario.py``: two tools, a hand-off, a tool error, a loop, an
unfinished task, run by one framework under its usual instrumentation), the recorded OTLP
bodies are POSTed unchanged to an in-process worker (SQLite store, the offline demo judge;
rules on ``agent``: the deterministic ``tool_errors`` and ``repeated_tool_calls`` checks and
faithfulness). Printed as one JSON document: per recording, the framework and its pinned
versions, the agent evaluations owed (one per rule per turn: 15), scored, scored with the right
trajectory, the owed ones skipped by reason, per trajectory field the turns read right (steps,
tool names, arguments, results, hand-offs; agents, task and final output beside them), why
each wrong turn is wrong, and whether the checks found the planted error and loop (and raised
no false alarm). ``--table`` adds a markdown table. Definitions: ``tests/interop/agents.py``.

    .ci-venv/bin/python benchmarks/agents.py [RECORDING ...] > agents.json
    .ci-venv/bin/python benchmarks/agents.py --smoke   # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the packages that shape the spans (the manifests pin whole environments)
KEY_PACKAGES = re.compile(
    r"^(openinference-instrumentation-.*|openai-agents|pydantic-ai-slim|strands-agents|"
    r"langgraph|langchain-core|crewai|opentelemetry-sdk)$"
)
SMOKE_RECORDING = "agent-pydantic-ai"


def summarise(done: Any) -> dict[str, Any]:
    from tests.interop.agents import FIELDS, judge_agents

    verdict = judge_agents(done)
    manifest = done.manifest
    turns = verdict.turns_compared
    return {
        "recording": done.recording.removeprefix("agents/"),
        "library": manifest["library"],
        "content_capture": manifest["content_capture"],
        "handoff": manifest.get("handoff"),
        "versions": {k: v for k, v in manifest["packages"].items() if KEY_PACKAGES.match(k)},
        "agent_evaluations_owed": verdict.owed,
        "scored": verdict.scored,
        "scored_right_trajectory": verdict.scored_right,
        "share_scored_right": round(verdict.scored_right / verdict.owed, 3),
        "owed_skipped_by_reason": dict(verdict.skipped.most_common()),
        "duplicates": verdict.duplicates,
        "sub_agent_evaluations": verdict.sub_agent_evaluations,
        "turns": turns,
        "trajectory_fields_right": {f: f"{verdict.fields[f]}/{turns}" for f in FIELDS},
        "turns_wrong": verdict.wrong,
        "notes": verdict.notes,
        "checks": verdict.checks,
        "errors": sum(1 for r in done.results if r.status == "error"),
        # cases the plausibility gate refused (evaluators/_rebuild/plausibility.py): 0 is
        # expected for a recording read right
        "refused": sum(1 for r in done.results if r.error_type == "implausible_field"),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| recording | owed | scored | right trajectory | share | error found | loop found |"
        " fields right (steps/names/args/results/hand-offs) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f = r["trajectory_fields_right"]
        checks = r["checks"]
        found = {
            k: "yes" if v["found"] and not v["false_alarms"] else "no" for k, v in checks.items()
        }
        lines.append(
            f"| {r['recording']} | {r['agent_evaluations_owed']} | {r['scored']} | "
            f"{r['scored_right_trajectory']} | {r['share_scored_right']:.0%} | "
            f"{found.get('tool-errors', '-')} | {found.get('loops', '-')} | "
            f"{f['steps']} / {f['tool_names']} / {f['arguments']} / {f['results']} / "
            f"{f['handoffs']} |"
        )
    return "\n".join(lines)


def main() -> int:
    sys.path.insert(0, str(ROOT))  # tests.interop: the replay pipeline and the scenario
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from spanjudge._demo.judge import start_offline_judge
    from tests.interop.agents import AGENT_RECORDINGS, replay_agents

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="*", default=list(AGENT_RECORDINGS))
    parser.add_argument("--table", action="store_true", help="also print a markdown table")
    parser.add_argument(
        "--smoke", action="store_true", help=f"seconds: the {SMOKE_RECORDING} recording only"
    )
    args = parser.parse_args()
    if args.smoke:
        args.recordings = [SMOKE_RECORDING]
    unknown = [r for r in args.recordings if r not in AGENT_RECORDINGS]
    if unknown:
        parser.error(f"unknown recording(s) {unknown}; known: {list(AGENT_RECORDINGS)}")
    judge = start_offline_judge()
    rows = []
    try:
        for recording in args.recordings:
            with tempfile.TemporaryDirectory() as tmp:
                done = replay_agents(recording, Path(tmp), judge)
            rows.append(summarise(done))
    finally:
        judge.stop()
    report = {
        "benchmark": "agents",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
        "judge": "offline demo judge (deterministic text rules)",
        "goal": "share_scored_right >= 0.95 for every framework (issue 28)",
        "frameworks": rows,
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.table:
        sys.stdout.write(_table(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
