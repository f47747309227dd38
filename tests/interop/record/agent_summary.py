"""The agent-scenario part of a recording's SUMMARY.md: where each trajectory element lives.

``summarize.py`` calls :func:`sections` for recordings whose manifest says ``"scenario":
"agent"``. Per turn (a trace is the turn whose question it holds) it prints the span tree, then
each expected step of ``agent_scenario`` with the places that hold it: a model call by the
tool-call ids the scripted model gave it (``call_t<turn><agent>_<step>_<n>``, unique per step),
its text by the text; a tool execution by the spans named for the tool (with the attributes
holding its arguments) and the places holding its result or error; a hand-off by the places
naming the billing agent; the final output by its text. A step found nowhere says so.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import agent_scenario as sc
from summarize import Decoded, SpanRow, cut

MAX_PLACES = 8


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _places(spans: list[SpanRow], needles: list[str]) -> list[str]:
    """``span `name` attr `key``` (or event) for every value holding all of ``needles``."""
    hits = []
    for s in spans:
        for k, v in s.attributes.items():
            text = _text(v)
            if all(n in text for n in needles):
                hits.append(f"`{s.name}`.`{k}`")
        for name, attributes in s.events:
            for k, v in attributes.items():
                if all(n in _text(v) for n in needles):
                    hits.append(f"`{s.name}` event `{name}`.`{k}`")
        if s.status and all(n in s.status for n in needles):
            hits.append(f"`{s.name}` status message")
    return hits


def _say(hits: list[str]) -> str:
    if not hits:
        return "**nowhere**"
    more = f" (+{len(hits) - MAX_PLACES} more)" if len(hits) > MAX_PLACES else ""
    return "; ".join(dict.fromkeys(hits[:MAX_PLACES])) + more


def _turn_traces(decoded: Decoded) -> dict[int, list[SpanRow]]:
    by_trace: dict[str, list[SpanRow]] = defaultdict(list)
    for s in decoded.spans:
        by_trace[s.trace_id].append(s)
    out: dict[int, list[SpanRow]] = {}
    for spans in by_trace.values():
        texts = " ".join(_text(v) for s in spans for v in s.attributes.values())
        texts += " ".join(_text(a) for s in spans for _, a in s.events)
        turn = sc.turn_for_question(texts)
        if turn is not None and turn.number not in out:
            out[turn.number] = spans
    return out


def _tree(spans: list[SpanRow]) -> list[str]:
    ids = {s.span_id for s in spans}
    children: dict[str, list[SpanRow]] = defaultdict(list)
    for s in spans:
        children[s.parent_id if s.parent_id in ids else ""].append(s)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for s in children[parent]:
            status = f" status {cut(s.status)}" if s.status.startswith("ERROR") else ""
            lines.append(f"{'  ' * depth}- {s.label}{status}")
            walk(s.span_id, depth + 1)

    walk("", 0)
    return lines


def _step_lines(turn: sc.Turn, spans: list[SpanRow], handoff: sc.HandOffShape) -> list[str]:
    lines = []
    model_step: dict[str, int] = defaultdict(int)
    tag = {sc.SUPPORT_AGENT: "s", sc.BILLING_AGENT: "b"}
    for n, step in enumerate(turn.expected(handoff).steps, 1):
        if isinstance(step, sc.ModelCall):
            k = model_step[step.agent]
            model_step[step.agent] += 1
            if step.tool_calls:
                call_id = f"call_t{turn.number}{tag[step.agent]}_{k}_0"
                wanted = ", ".join(f"{c.name}({c.arguments})" for c in step.tool_calls)
                lines.append(
                    f"{n}. model call of {step.agent} -> {wanted}: id `{call_id}` in "
                    + _say(_places(spans, [call_id]))
                )
            else:
                lines.append(
                    f"{n}. model call of {step.agent} -> text: "
                    + _say(_places(spans, [step.text or ""]))
                )
        elif isinstance(step, sc.ToolExecution):
            named = [s for s in spans if step.name in s.name]
            outcome = step.result if step.error is None else step.error
            # the argument values, in places that are not the outcome (which repeats the id)
            values = [str(v) for v in step.arguments.values()]
            places = set(_places(named, [outcome or ""]))
            args = _say([p for p in _places(named, values) if p not in places])
            label = "result" if step.error is None else "error"
            lines.append(
                f"{n}. tool {step.name}({step.arguments}) by {step.agent}: spans named for it: "
                f"{_say([s.label for s in named])}; arguments in {args}; {label} "
                f"{cut(outcome)!r} in {_say(_places(spans, [outcome or '']))}"
            )
        else:
            names = [s.label for s in spans if "billing" in s.name.lower()]
            lines.append(
                f"{n}. hand-off {step.from_agent} -> {step.to_agent}: spans named for it: "
                f"{_say(names)}; `{step.to_agent}` in " + _say(_places(spans, [step.to_agent]))
            )
    lines.append(f"- final output in {_say(_places(spans, [turn.answer]))}")
    return lines


def sections(decoded: Decoded, manifest: dict[str, Any]) -> list[str]:
    """The markdown lines: per turn, the span tree and where each trajectory step is."""
    handoff = sc.HandOffShape.from_dict(manifest.get("handoff"))
    out = ["## Trajectory elements per turn (agent scenario)", ""]
    traces = _turn_traces(decoded)
    for turn in sc.TURNS:
        spans = traces.get(turn.number)
        out.append(f"### Turn {turn.number} ({turn.kind}): {turn.question}")
        out.append("")
        if spans is None:
            out += ["No trace holds this question.", ""]
            continue
        out += _tree(spans)
        out.append("")
        out += _step_lines(turn, spans, handoff)
        out.append("")
    return out
