"""Interop: how much of what real instrumentation libraries write spanjudge evaluates.

For every recording under ``tests/interop/fixtures/`` (the scenario of
``tests/interop/record/scenario.py`` traced by one library, content capture on or off), the
recorded OTLP bodies are POSTed unchanged to an in-process worker served on 127.0.0.1 (SQLite
store, the offline demo judge, rules: faithfulness and bias on ``llm`` and ``agent``, topic
adherence on ``conversation``; the pipeline of ``tests/interop/test_conformance.py``). Printed as
one JSON document: per recording, the library and pinned versions (its ``manifest.json``), the
evaluations owed, scored right, duplicates, evaluated but not owed, the owed ones skipped by
reason (and why each wrong one is wrong), the share scored right, the cases the plausibility
gate refused (``refused``, by field and check); ``--table`` adds the markdown table of issue 27
with a ``refused`` column (issue 37).

Owed, scored right and duplicates are defined in ``tests/interop/owed.py``, from the scenario
alone (never from what spanjudge recognised): per turn, one evaluation of the agent turn per
agent rule and of the answering model call per LLM rule, plus the conversation ``sess-42``:
5*2 + 5*2 + 1 = 21.

    .ci-venv/bin/python benchmarks/interop.py [RECORDING ...] > interop.json
    .ci-venv/bin/python benchmarks/interop.py --smoke   # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the packages that shape the spans (the manifests pin whole environments)
KEY_PACKAGES = re.compile(
    r"^(openinference-.*|traceloop-sdk|opentelemetry-instrumentation-(openai.*|langchain)|"
    r"opentelemetry-util-genai|openlit|litellm|pydantic-ai-slim|langchain-(core|openai)|openai|"
    r"spanjudge|opentelemetry-sdk|ai|@ai-sdk/openai|llama-index-core|openai-agents|"
    r"opentelemetry-instrumentation-(openai-agents-v2|llamaindex)|strands-agents|google-adk|"
    r"smolagents|haystack-ai|opentelemetry-haystack|mlflow|langfuse)$"
)
MISSING = re.compile(r"missing (\w+)")
# what a skip reason blames, in the words of the setting or the span (first found wins)
CAUSES = (
    "OPENINFERENCE_HIDE",
    "TRACELOOP_TRACE_CONTENT",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "include_content",
    "tool calls only",
    "no retriever spans",
)


def _reason_kind(reason: str | None) -> str:
    """A skip reason as ``missing <fields>: <cause>``, so equal causes count together."""
    text = reason or ""
    fields = ", ".join(dict.fromkeys(MISSING.findall(text))) or "other"
    cause = next((c for c in CAUSES if c in text), text[:80])
    return f"missing {fields}: {cause}"


IMPLAUSIBLE_FIELD = "implausible_field"
INDEX = re.compile(r"\[\d+\]")
REFUSED = re.compile(r"^implausible (\S+?): .*?\((\w+)\) in ")


def _refused_kind(reason: str | None) -> str:
    """A refusal's reason as ``<field>: <check>`` (turn and step indexes dropped)."""
    match = REFUSED.match(reason or "")
    if match is None:
        return (reason or "")[:80]
    field = INDEX.sub("[]", match.group(1))
    return f"{field}: {match.group(2)}"


def summarise(
    done: Any, agent_rules: list[str], llm_rules: list[str], topics: str
) -> dict[str, Any]:
    from tests.interop.owed import judge_recording, skipped_not_owed

    verdict = judge_recording(done, agent_rules, llm_rules, topics)
    owed_ids = {id(r) for r in verdict.owed_results}
    skipped = Counter(
        _reason_kind(r.skip_reason)
        for r in done.results
        if r.status == "skipped" and id(r) in owed_ids
    )
    manifest = done.manifest
    return {
        "recording": done.recording,
        "library": manifest["library"],
        "content_capture": manifest["content_capture"],
        "versions": {k: v for k, v in manifest["packages"].items() if KEY_PACKAGES.match(k)},
        "recorded_python": manifest["python"],
        "evaluations_owed": verdict.owed,
        "scored_right": verdict.scored_right,
        "duplicates": verdict.duplicates,
        "evaluated_not_owed": verdict.evaluated_not_owed,
        "share_scored_right": round(verdict.scored_right / verdict.owed, 3),
        "owed_skipped_by_reason": dict(skipped.most_common()),
        "not_right": verdict.wrong,
        "skipped_not_owed": dict(skipped_not_owed(done, verdict).most_common()),
        "errors": sum(1 for r in done.results if r.status == "error"),
        # cases the plausibility gate refused (evaluators/_rebuild/plausibility.py): 0 is
        # expected for a recording read right; by field and check
        "refused": sum(1 for r in done.results if r.error_type == IMPLAUSIBLE_FIELD),
        "refused_by_check": dict(
            Counter(
                _refused_kind(r.skip_reason)
                for r in done.results
                if r.error_type == IMPLAUSIBLE_FIELD
            ).most_common()
        ),
        "context_sources": dict(
            Counter(r.context_source for r in done.results if r.context_source).most_common()
        ),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    """The rows as the markdown table the issue quotes."""
    lines = [
        "| recording | owed | scored right | duplicates | evaluated, not owed | refused |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['recording']} | {r['evaluations_owed']} | {r['scored_right']} | "
        f"{r['duplicates']} | {r['evaluated_not_owed']} | {r['refused']} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> int:
    sys.path.insert(0, str(ROOT))  # tests.interop.conftest: the replay pipeline
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from spanjudge._demo.judge import start_offline_judge
    from tests.interop.conftest import RECORDINGS, SPAN_RULES, TOPICS, replay

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="*", default=list(RECORDINGS))
    parser.add_argument("--table", action="store_true", help="also print a markdown table")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: the spanjudge recording only (checks the script runs)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.recordings = ["spanjudge"]
    agent_rules = [n for n, (_, target) in SPAN_RULES.items() if target == "agent"]
    llm_rules = [n for n, (_, target) in SPAN_RULES.items() if target == "llm"]
    judge = start_offline_judge()
    rows = []
    try:
        for recording in args.recordings:
            with tempfile.TemporaryDirectory() as tmp:
                done = replay(recording, Path(tmp), judge)
            rows.append(summarise(done, agent_rules, llm_rules, TOPICS))
    finally:
        judge.stop()
    report = {
        "benchmark": "interop",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
        "judge": "offline demo judge (deterministic text rules)",
        "libraries": rows,
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.table:
        sys.stdout.write(_table(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
