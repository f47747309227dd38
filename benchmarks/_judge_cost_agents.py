"""The "agents" part of benchmarks/judge_cost.py (a part it imports, not a script): judge
calls and prompt/completion tokens per agentic evaluation, our built-in metrics against
deepeval 4.3.1's own (run through the bridge, which builds the trace they read from the same
trajectory), on the same cases, both judged by the same scripted loopback judge.

Cases: every agent turn of the recorded agent frameworks (tests/interop/fixtures/agents: two
tools, a hand-off, a tool error, a loop, an unfinished task), rebuilt as the worker rebuilds
them (for Tool Correctness the ones with tools offered, see :func:`metric_pairs`); for Goal
Accuracy each framework's turns as one conversation. The scripted judge answers whatever schema
it is sent with a fixed judgement (scores 0.75, verdicts "yes", no plan found, no step blamed),
so the counts measure the metrics' prompts and call plans, not the judge.

Tokens are the scripted server's (characters / 4), the same rule for both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

# deepeval phones home and checks for updates on import unless told not to (no network here)
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("DEEPEVAL_UPDATE_WARNING_OPT_IN", "NO")

from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge.evaluators._judge.deepeval_bridge.metric import DeepEvalMetric
from spanjudge.evaluators._judge.deepeval_bridge.model import as_deepeval_model
from spanjudge.evaluators._judge.metrics.trajectory_checks import ToolErrorCheck
from spanjudge.evaluators._judge.test_case import (
    ConversationalTestCase,
    LLMTestCase,
    ToolCall,
    Turn,
)
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import default_case
from spanjudge.evaluators._rebuild.targets import find_targets

AGENTS = Path(__file__).resolve().parents[1] / "tests" / "interop" / "fixtures" / "agents"
FRAMEWORKS = ("crewai", "langgraph", "openai-agents", "pydantic-ai", "strands")


# ---------------------------------------------------------------------------- the cases
def agent_cases(frameworks: tuple[str, ...] = FRAMEWORKS) -> dict[str, list[LLMTestCase]]:
    """Every agent turn of each recording, as the worker rebuilds it (skips left out)."""
    found: dict[str, list[LLMTestCase]] = {}
    rule = Rule(ToolErrorCheck(), target="agent")
    for framework in frameworks:
        paths = sorted((AGENTS / f"agent-{framework}").glob("*-traces.pb"))
        spans = [s for p in paths for s in decode_traces(p.read_bytes(), PROTOBUF)]
        traces: dict[str, list[Any]] = {}
        for s in spans:
            traces.setdefault(s.trace_id, []).append(s)
        cases = []
        for trace in sorted(traces.values(), key=lambda t: min(s.start_time_unix_nano for s in t)):
            for target in find_targets(rule, trace):
                case = default_case(target, trace)
                if isinstance(case, LLMTestCase) and case.trajectory is not None:
                    cases.append(case)
        found[framework] = cases
    return found


def with_expected_tools(case: LLMTestCase) -> LLMTestCase:
    """``case`` expecting the tools it called (by name): what deepeval's Tool Correctness needs."""
    called = [ToolCall(name=t.name) for t in case.tools_called or []]
    return case.model_copy(update={"expected_tools": called})


def _offered(case: LLMTestCase) -> bool:
    """Whether the turn called a tool and its spans show the tools the model was offered."""
    return bool(case.tools_called) and bool(case.trajectory and case.trajectory.tools_available)


def conversation_of(cases: list[LLMTestCase], name: str) -> ConversationalTestCase:
    turns: list[Turn] = []
    for case in cases:
        turns.append(Turn(role="user", content=case.input or "(none)"))
        turns.append(
            Turn(
                role="assistant",
                content=case.actual_output or "(none)",
                tools_called=case.tools_called,
                trajectory=case.trajectory,
            )
        )
    return ConversationalTestCase(turns=turns, name=name)


# ---------------------------------------------------------------------------- the judge
def _value(schema: dict[str, Any], defs: dict[str, Any], key: str) -> Any:
    if "$ref" in schema:
        return _value(defs[schema["$ref"].split("/")[-1]], defs, key)
    for option in schema.get("anyOf", []):
        if option.get("type") != "null":
            return _value(option, defs, key)
    if "enum" in schema:
        return "yes" if "yes" in schema["enum"] else schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: _value(v, defs, k) for k, v in props.items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        item = _value(schema.get("items", {}), defs, key)
        if key in ("steps", "plan"):  # no steps to blame, no plan found
            return []
        return [item] * count
    if kind in ("number", "integer"):
        return 0 if key == "step" else 0.75
    if kind == "boolean":
        return True
    return "yes" if key == "verdict" else "scripted"


def answer(request: Any) -> dict[str, Any]:
    """A fixed judgement for any schema the request sends (see the module docstring)."""
    form = (request.body.get("response_format") or {}).get("json_schema") or {}
    schema = form.get("schema") or {"type": "object", "properties": {"text": {"type": "string"}}}
    found: dict[str, Any] = _value(schema, schema.get("$defs", {}), "")
    return found


# ---------------------------------------------------------------------------- the pairs
def metric_pairs(judge: Any, model: Any) -> list[tuple[str, str, str, Any, Any]]:
    """(name, our cases, deepeval's cases, ours, deepeval's) for every agentic metric in both.

    Tool Correctness compares the judged tool selection, on the turns that called a tool and
    whose spans show the tools offered (pydantic-ai's and Strands'): ours referenceless (each
    call judged among the tools offered), deepeval's with the turn's own calls as the expected
    tools (so its deterministic part is 1) and the offered tools read from the spans (the
    bridge's default when the metric was given none), its one selection call."""
    from deepeval import metrics as de

    import spanjudge as ours

    return [
        ("task_completion", "turn", "turn", ours.TaskCompletionMetric(model=judge),
         de.TaskCompletionMetric(model=model)),
        ("step_efficiency", "turn", "turn", ours.StepEfficiencyMetric(model=judge),
         de.StepEfficiencyMetric(model=model)),
        ("plan_adherence", "turn", "turn", ours.PlanAdherenceMetric(model=judge),
         de.PlanAdherenceMetric(model=model)),
        ("plan_quality", "turn", "turn", ours.PlanQualityMetric(model=judge),
         de.PlanQualityMetric(model=model)),
        ("argument_correctness", "turn", "turn", ours.ArgumentCorrectnessMetric(model=judge),
         de.ArgumentCorrectnessMetric(model=model)),
        ("tool_correctness", "with_tools", "expected", ours.ToolCorrectnessMetric(model=judge),
         de.ToolCorrectnessMetric(model=model)),
        ("goal_accuracy", "conversation", "conversation", ours.GoalAccuracyMetric(model=judge),
         de.GoalAccuracyMetric(model=model)),
    ]  # fmt: skip


async def _measure(metric: Any, cases: list[Any], limit: int) -> dict[str, Any]:
    slots = asyncio.Semaphore(limit)
    rows: list[Any] = []

    async def one(case: Any) -> None:
        copy = metric.clone()
        if copy.missing_fields(case):
            rows.append(None)
            return
        # an exception leaves the metric's error set: counted as an error below
        async with slots:
            with contextlib.suppress(Exception):
                await copy.a_measure(case)
        rows.append(copy.to_data())

    await asyncio.gather(*(one(c) for c in cases))
    done = [r for r in rows if r is not None]
    scored = [r for r in done if r.error is None]
    n = max(len(scored), 1)
    return {
        "cases": len(cases),
        "scored": len(scored),
        "skipped": rows.count(None),
        "errors": len(done) - len(scored),
        "judge_calls_per_case": round(sum(r.judge_calls for r in scored) / n, 3),
        "prompt_tokens_per_case": round(sum(r.input_tokens for r in scored) / n, 1),
        "completion_tokens_per_case": round(sum(r.output_tokens for r in scored) / n, 1),
        "total_tokens_per_case": round(
            sum(r.input_tokens + r.output_tokens for r in scored) / n, 1
        ),
    }


def _ratio(mine: float, theirs: float) -> float | None:
    return round(mine / theirs, 3) if theirs else None


def run_agents(concurrency: int, frameworks: tuple[str, ...] = FRAMEWORKS) -> dict[str, Any]:
    """Ours vs deepeval's per agentic metric on the recorded agent turns."""
    from spanjudge.testing import ScriptedJudgeServer

    by_framework = agent_cases(frameworks)
    turns = [c for cases in by_framework.values() for c in cases]
    kinds = {
        "turn": turns,
        "with_tools": [c for c in turns if _offered(c)],
        "expected": [with_expected_tools(c) for c in turns if _offered(c)],
        "conversation": [conversation_of(c, f) for f, c in by_framework.items() if c],
    }
    per_metric: dict[str, Any] = {}
    with ScriptedJudgeServer() as server:
        server.add_rule(answer)
        judge = server.judge(max_concurrency=concurrency)
        for name, our_kind, their_kind, mine, theirs in metric_pairs(
            judge, as_deepeval_model(judge)
        ):
            ours_row = asyncio.run(_measure(mine, kinds[our_kind], concurrency))
            bridged = DeepEvalMetric(theirs)
            deepeval_row = asyncio.run(_measure(bridged, kinds[their_kind], concurrency))
            per_metric[name] = {
                "ours": ours_row,
                "deepeval": deepeval_row,
                "calls_ours_over_deepeval": _ratio(
                    ours_row["judge_calls_per_case"], deepeval_row["judge_calls_per_case"]
                ),
                "prompt_tokens_ours_over_deepeval": _ratio(
                    ours_row["prompt_tokens_per_case"], deepeval_row["prompt_tokens_per_case"]
                ),
                "total_tokens_ours_over_deepeval": _ratio(
                    ours_row["total_tokens_per_case"], deepeval_row["total_tokens_per_case"]
                ),
            }
    return {
        "frameworks": {f: len(c) for f, c in by_framework.items()},
        "agent_turns": len(turns),
        "judge": "scripted loopback (spanjudge.testing), tokens = characters / 4",
        "per_metric": per_metric,
    }
