"""What an agent recording owes and what the worker made of it, judged against the agent
scenario alone (``tests/interop/record/agent_scenario.py``), never against what spanjudge
recognised. Shared by ``test_agents.py`` and ``benchmarks/agents.py``.

The worker runs three rules on ``agent`` targets: the deterministic checks ``tool_errors`` and
``repeated_tool_calls`` (no judge), and faithfulness (the offline judge), so a recording without
content shows its skips. Owed, per scenario turn (one trace each): one evaluation per rule of
the turn, the top-most agent target of the trace: 5 turns x 3 rules = 15. Agent targets below
it (sub-agents) are evaluated too; they are counted apart, never owed.

* **scored right**: the owed evaluation is scored and its case's trajectory is the turn's
  expected one (``turn.expected(HandOffShape.from_dict(manifest["handoff"]))``): every step in
  order (``agent`` steps are frames, left out; one that carries a hand-off stands for it), with
  tool names, arguments, results and errors; :func:`compare` says which field is wrong;
* **checks**: ``tool_errors`` fails turn 3 (the planted error) and passes every other turn;
  ``repeated_tool_calls`` fails turn 4 (the loop) and passes every other turn.

Example::

    done = replay_agents("agents/agent-strands", tmp, judge)
    verdict = judge_agents(done)
    verdict.owed, verdict.scored_right, verdict.fields
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.loading import load_trace
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import find_targets
from spanjudge.evaluators._rebuild.trajectory import Step, Trajectory
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.worker.service import Worker
from tests.interop.conftest import FIXTURES, Replayed, config_with, replay

sys.path.insert(0, str(Path(__file__).parent / "record"))
import agent_scenario as sc

AGENT_FIXTURES = FIXTURES / "agents"
AGENT_RECORDINGS = tuple(
    sorted(p.name for p in AGENT_FIXTURES.iterdir() if (p / "manifest.json").exists())
)
TOOL_ERRORS, LOOPS, FAITHFULNESS = "tool-errors", "loops", "faith-agent"
AGENT_RULES = {
    TOOL_ERRORS: ("tool_errors", {}),
    LOOPS: ("repeated_tool_calls", {"max_repeats": 3}),
    FAITHFULNESS: ("faithfulness", {}),
}
# check rule -> the turn whose planted fault it must find
PLANTED = {TOOL_ERRORS: 3, LOOPS: 4}
FIELDS = ("steps", "tool_names", "arguments", "results", "handoffs", "agents", "task", "output")
# the fields "the right trajectory" needs (issue 28: every step, in order, with names,
# arguments and results); agents, task and output are reported beside them
REQUIRED = ("steps", "tool_names", "arguments", "results", "handoffs")


def agent_config(judge: ScriptedJudgeServer, store_url: str, downstream: str) -> dict[str, Any]:
    rules = [
        {"metric": metric, "target": "agent", "name": name, "params": params}
        for name, (metric, params) in AGENT_RULES.items()
    ]
    return config_with(rules, judge, store_url, downstream)


def _read_back(worker: Worker, done: Replayed) -> None:
    """Turns by trace start order; per trace, its top-most agent target (``roots``) and every
    agent target's rebuilt case."""
    store = worker.store
    trace_ids, _ = store.targets_since(since=0.0, until=worker.clock() + 1)
    traces = {tid: load_trace(store, tid) for tid in trace_ids}
    ordered = sorted(traces, key=lambda tid: min(s.start_time_unix_nano for s in traces[tid]))
    done.turn_of_trace = {tid: n for n, tid in enumerate(ordered, start=1)}
    done.spans = traces
    rules = {rule.name: rule for rule in worker.rules}
    for tid, spans in traces.items():
        targets = find_targets(rules[TOOL_ERRORS], spans, apply_filter=False)
        ids = {t.span_id for t in targets}
        tree = SpanTree(spans)
        top = [t for t in targets if not any(a.span_id in ids for a in tree.ancestors(t.span))]
        if top and top[0].span is not None:
            done.roots[tid] = top[0].span
        for name in AGENT_RULES:
            for target in targets:
                done.cases[(name, target.target_id)] = build_case(rules[name], target, spans)


def replay_agents(recording: str, tmp: Path, judge: ScriptedJudgeServer) -> Replayed:
    """``recording`` (a folder of ``fixtures/agents``) through the worker with the agent rules."""
    return replay(f"agents/{recording}", tmp, judge, config=agent_config, read_back=_read_back)


# ====================================================================== comparing trajectories
def _norm(name: str | None) -> str:
    return re.sub(r"[^a-z0-9]+", "_", (name or "").lower()).strip("_")


def _value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value.strip()
    return value


def _same_text(got: Any, want: str) -> bool:
    got = _value(got)
    return isinstance(got, str) and got.strip() == want.strip()


def observed(trajectory: Trajectory) -> list[Step]:
    """The steps compared: ``agent`` steps are frames, kept only when they carry a hand-off."""
    return [s for s in trajectory.steps if s.kind != "agent" or s.handoff_to]


def recorded_text(spans: list[SpanRecord]) -> str:
    """Every attribute value, event attribute and status message of ``spans``, as one text."""
    parts = [s.status_message or "" for s in spans]
    parts += [_text(v) for s in spans for v in s.attributes.values()]
    parts += [_text(v) for s in spans for e in s.events for v in e.attributes.values()]
    return "\n".join(parts)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def compare(
    trajectory: Trajectory | None, expected: sc.Trajectory, recorded: str | None = None
) -> dict[str, str | None]:
    """Per field of :data:`FIELDS`: ``None`` when right, else what is wrong. A tool error's
    text is required only where the spans hold it (``recorded``: their text; a framework
    that redacts it, as the OpenAI Agents SDK does by default, records only that it failed)."""
    out: dict[str, str | None] = dict.fromkeys(FIELDS)
    if trajectory is None:
        return dict.fromkeys(FIELDS, "no trajectory")
    got, want = observed(trajectory), list(expected.steps)
    kinds = [_kind(s) for s in want]
    if [s.kind for s in got] != kinds:
        out["steps"] = f"{[s.kind for s in got]} != {kinds}"
    for g, w in zip(got, want, strict=False):
        at = f"step {g.index}"
        if isinstance(w, sc.ModelCall):
            if g.kind != "model_call":
                continue
            names = [c.name for c in g.tool_calls]
            if names != [c.name for c in w.tool_calls]:
                out["tool_names"] = out["tool_names"] or f"{at} requests {names}"
            elif [_value(c.arguments) or {} for c in g.tool_calls] != [
                c.arguments for c in w.tool_calls
            ]:
                out["arguments"] = out["arguments"] or f"{at} requests {g.tool_calls}"
            if w.text is not None and not _same_text(g.result, w.text):
                out["results"] = out["results"] or f"{at} model text {str(g.result)[:60]!r}"
        elif isinstance(w, sc.ToolExecution):
            if g.kind != "tool_call":
                continue
            if g.name != w.name:
                out["tool_names"] = out["tool_names"] or f"{at} tool {g.name!r}"
            if (_value(g.arguments) or {}) != w.arguments:
                out["arguments"] = out["arguments"] or f"{at} arguments {g.arguments!r}"
            redacted = recorded is not None and w.error is not None and w.error not in recorded
            if w.error is not None and (not g.error or (w.error not in g.error and not redacted)):
                out["results"] = out["results"] or f"{at} error {str(g.error)[:80]!r}"
            elif w.result is not None and not _same_text(g.result, w.result):
                out["results"] = out["results"] or f"{at} result {str(g.result)[:60]!r}"
        elif isinstance(w, sc.HandOff) and g.kind in ("handoff", "agent"):
            if _norm(g.handoff_to) != _norm(w.to_agent):
                out["handoffs"] = f"{at} hand-off to {g.handoff_to!r}"
            continue
        if not _agent_is(g.agent, w.agent):
            out["agents"] = out["agents"] or f"{at} agent {g.agent!r}"
    if not trajectory.task or expected.task not in trajectory.task:
        out["task"] = f"task {str(trajectory.task)[:60]!r}"
    if not _same_text(trajectory.final_output, expected.final_output):
        out["output"] = f"final output {str(trajectory.final_output)[:60]!r}"
    return out


def _kind(step: sc.Step) -> str:
    if isinstance(step, sc.ModelCall):
        return "model_call"
    return "tool_call" if isinstance(step, sc.ToolExecution) else "handoff"


def _agent_is(got: str | None, want: str) -> bool:
    # a framework may decorate the agent's name (CrewAI's "support-agent._execute_core")
    return bool(got) and (_norm(got) == _norm(want) or _norm(got).startswith(_norm(want) + "_"))


# ====================================================================== the verdict
_MISSING = re.compile(r"missing (\w+)")
# what a skip reason blames, in the words of the setting (first found wins)
_CAUSES = (
    "OPENINFERENCE_HIDE",
    "TRACELOOP_TRACE_CONTENT",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "include_content",
    "no retriever spans",
)


def reason_kind(reason: str | None) -> str:
    """A skip reason as ``missing <fields>: <cause>``, so equal causes count together."""
    text = reason or ""
    fields = ", ".join(dict.fromkeys(_MISSING.findall(text))) or "other"
    cause = next((c for c in _CAUSES if c in text), text[:80])
    return f"missing {fields}: {cause}"


@dataclass
class AgentVerdict:
    """One agent recording's tally (see the module docstring)."""

    owed: int = 0
    scored: int = 0
    scored_right: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    fields: Counter[str] = field(default_factory=Counter)  # field -> owed turns right
    turns_compared: int = 0
    wrong: list[str] = field(default_factory=list)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    sub_agent_evaluations: int = 0
    duplicates: int = 0
    notes: list[str] = field(default_factory=list)


def _trajectory(done: Replayed, rule: str, target_id: str) -> Trajectory | None:
    case = done.cases.get((rule, target_id))
    return getattr(case, "trajectory", None)


def judge_agents(done: Replayed) -> AgentVerdict:
    shape = sc.HandOffShape.from_dict(done.manifest.get("handoff"))
    turns = {t.number: t for t in sc.TURNS}
    verdict = AgentVerdict()
    roots = {tid: span.span_id for tid, span in done.roots.items()}
    trace_of_turn = {n: tid for tid, n in done.turn_of_trace.items()}
    for number, turn in turns.items():
        expected = turn.expected(shape)
        tid = trace_of_turn.get(number)
        root = roots.get(tid or "")
        recorded = recorded_text(done.spans.get(tid or "", []))
        if any(e.error and e.error not in recorded for e in expected.tool_executions):
            verdict.notes.append(
                f"turn {number}: the tool error's text is in no span (redacted, or content off)"
            )
        trajectory = _trajectory(done, TOOL_ERRORS, root) if root else None
        problems = compare(trajectory, expected, recorded)
        verdict.turns_compared += 1
        for name in FIELDS:
            verdict.fields[name] += problems[name] is None
        right = all(problems[n] is None for n in REQUIRED)
        if not right:
            why = "; ".join(f"{n}: {problems[n]}" for n in REQUIRED if problems[n])
            verdict.wrong.append(f"turn {number} ({turn.kind}): {why}")
        for rule in AGENT_RULES:
            verdict.owed += 1
            results = [r for r in done.of_rule(rule) if r.trace_id == tid]
            owed = [r for r in results if r.target_id == root]
            verdict.sub_agent_evaluations += len([r for r in results if r.target_id != root])
            verdict.duplicates += max(0, len(owed) - 1)
            result = owed[0] if owed else None
            if result is None:
                verdict.skipped["no result for the turn's agent"] += 1
                continue
            if result.status == "skipped":
                verdict.skipped[reason_kind(result.skip_reason)] += 1
                continue
            if result.status != "scored":
                verdict.skipped[f"{result.status}: {(result.error_message or '')[:100]}"] += 1
                continue
            verdict.scored += 1
            verdict.scored_right += right
            if rule in PLANTED:
                _check(verdict, rule, number, result)
    return verdict


def _check(verdict: AgentVerdict, rule: str, number: int, result: EvaluationRecord) -> None:
    tally = verdict.checks.setdefault(
        rule, {"planted_turn": PLANTED[rule], "found": False, "false_alarms": [], "reason": None}
    )
    failed = result.score is not None and result.score < 1.0
    if number == PLANTED[rule]:
        tally["found"] = failed
        tally["reason"] = result.reason
    elif failed:
        tally["false_alarms"].append(number)
