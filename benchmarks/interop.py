"""Interop: how much of what real instrumentation libraries write spanjudge evaluates.

For every recording under ``tests/interop/fixtures/`` (the scenario of
``tests/interop/record/scenario.py`` traced by one library, content capture on or off), the
recorded OTLP bodies are POSTed unchanged to an in-process worker served on 127.0.0.1 (SQLite
store, the offline demo judge, rules: faithfulness and bias on ``llm`` and ``agent``, topic
adherence on ``conversation``; the pipeline of ``tests/interop/test_conformance.py``). Printed as
one JSON document: per recording, the library and pinned versions (its ``manifest.json``), the
evaluations owed, scored, skipped by reason, results that were not owed, and the share scored.

Owed, from the scenario (never from what spanjudge recognised): per turn, the agent turn (the
root span of the turn's trace) for each agent rule and the one model call that answered with
text for each LLM rule (a call that answered with a tool call only is not owed: pydantic-ai's
retrieve round trip), plus the conversation ``sess-42`` for topic adherence: 5*2 + 5*2 + 1 = 21.

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
    r"spanjudge|opentelemetry-sdk|ai|@ai-sdk/openai)$"
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


def summarise(
    done: Any, agent_rules: list[str], llm_rules: list[str], topics: str
) -> dict[str, Any]:
    from tests.interop.conftest import scenario

    roots = {root.span_id for root in done.roots.values()}
    turns = sorted(set(done.turn_of_trace.values()))
    owed_keys: set[Any] = set()
    owed = scored = 0
    for rule in agent_rules:
        for result in done.of_rule(rule):
            if result.span_id in roots:
                owed_keys.add(id(result))
                scored += result.status == "scored"
        owed += len(roots)
    for rule in llm_rules:
        for number in turns:
            in_turn = [r for r in done.of_rule(rule) if done.turn(r) == number]
            answer = next((r for r in in_turn if r.status == "scored"), None)
            # with content off nothing tells the answering call from a tool-call round trip:
            # every call in the turn stands for the one owed
            owed_keys.update(id(r) for r in ([answer] if answer else in_turn))
            scored += answer is not None
            owed += 1
    session = [r for r in done.of_rule(topics) if r.target_id == scenario.SESSION_ID]
    owed_keys.update(id(r) for r in session)
    owed += 1
    scored += any(r.status == "scored" for r in session)
    skipped = Counter(
        _reason_kind(r.skip_reason)
        for r in done.results
        if r.status == "skipped" and id(r) in owed_keys
    )
    not_owed = Counter(
        f"{r.rule} {r.status}: "
        + (_reason_kind(r.skip_reason) if r.status == "skipped" else f"other {r.target_type}")
        for r in done.results
        if id(r) not in owed_keys
    )
    manifest = done.manifest
    return {
        "recording": done.recording,
        "library": manifest["library"],
        "content_capture": manifest["content_capture"],
        "versions": {k: v for k, v in manifest["packages"].items() if KEY_PACKAGES.match(k)},
        "recorded_python": manifest["python"],
        "evaluations_owed": owed,
        "scored": scored,
        "skipped_by_reason": dict(skipped.most_common()),
        "errors": sum(1 for r in done.results if r.status == "error"),
        "not_owed_results": dict(not_owed.most_common()),
        "share_scored": round(scored / owed, 3) if owed else None,
        "context_sources": dict(
            Counter(r.context_source for r in done.results if r.context_source).most_common()
        ),
    }


def main() -> int:
    sys.path.insert(0, str(ROOT))  # tests.interop.conftest: the replay pipeline
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from spanjudge._demo.judge import start_offline_judge
    from tests.interop.conftest import CONTENT_OFF, CONTENT_ON, SPAN_RULES, TOPICS, replay

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="*", default=[*CONTENT_ON, *CONTENT_OFF])
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
