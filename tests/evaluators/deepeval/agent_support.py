"""Shared by the deepeval agent-metric tests: the recorded agent turns (tests/interop/fixtures/
agents), the trace dict deepeval receives walked as steps, and the store + Monitor run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.metrics.trajectory_checks import ToolErrorCheck
from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import default_case
from spanjudge.evaluators._rebuild.targets import find_targets
from tests.evaluators.cache.conftest import Loop
from tests.support.clock import Clock

AGENTS = Path(__file__).parents[2] / "interop" / "fixtures" / "agents"
FRAMEWORKS = ("crewai", "langgraph", "openai-agents", "pydantic-ai", "strands")
# the recordings' scenario turns, in order (tests/interop/record/agent_scenario.py)
TWO_TOOLS, HANDOFF, TOOL_ERROR, LOOP, UNFINISHED = range(5)


def recorded(framework: str) -> list[SpanRecord]:
    paths = sorted((AGENTS / f"agent-{framework}").glob("*-traces.pb"))
    return [s for p in paths for s in decode_traces(p.read_bytes(), PROTOBUF)]


def turn_spans(framework: str, turn: int) -> list[SpanRecord]:
    """The spans of the ``turn``-th trace of a recording (traces by start time)."""
    spans = recorded(framework)
    starts: dict[str, int] = {}
    for s in spans:
        starts[s.trace_id] = min(starts.get(s.trace_id, s.start_time_unix_nano),
                                 s.start_time_unix_nano)  # fmt: skip
    trace_id = sorted(starts, key=lambda t: starts[t])[turn]
    return [s for s in spans if s.trace_id == trace_id]


def agent_case(spans: list[SpanRecord]) -> LLMTestCase:
    """The case a rule with ``target="agent"`` rebuilds for the first agent turn of ``spans``."""
    target = find_targets(Rule(ToolErrorCheck(), target="agent"), spans)[0]
    case = default_case(target, spans)
    assert isinstance(case, LLMTestCase)
    return case


def walk(span: dict[str, Any]) -> list[dict[str, Any]]:
    """Every span of a deepeval trace dict under the root, depth first (the order it ran)."""
    found = []
    for child in span.get("children", []):
        found.append(child)
        found.extend(walk(child))
    return found


def tool_steps(trace: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(s["name"], s.get("input"), s.get("error")) for s in walk(trace) if s["type"] == "tool"]


def requested(trace: dict[str, Any]) -> list[tuple[str, Any]]:
    """The tool calls the llm spans requested, in order."""
    calls = []
    for s in walk(trace):
        output = s.get("output")
        if s["type"] == "llm" and isinstance(output, dict):
            calls.extend((c["name"], c["args"]) for c in output.get("tool_calls") or [])
    return calls


def run_rules(
    loop: Loop, store: SpanStore, clock: Clock, spans: list[SpanRecord], rules: list[Rule]
) -> list[EvaluationRecord]:
    """Write ``spans``, let them settle, tick the real Monitor once, return the results."""
    store.write_spans(spans, now=clock())
    clock.advance(60)
    loop.monitor(store, rules).tick()
    return list(store.results())
