"""Write ``fixtures/<recording>/SUMMARY.md``: what a recording's OTLP bodies hold, decoded.

Run with the project's venv (it needs ``opentelemetry-proto``); ``record.sh`` runs it after each
recorder.  Usage::

    python tests/interop/record/summarize.py                       # every recording
    python tests/interop/record/summarize.py openinference ...     # these recordings
    python tests/interop/record/summarize.py --library openinference   # one library's

The summary lists, per span shape (scope, span name, the library's kind attribute), every
distinct attribute key and span event name; per log event name its attribute keys and body
shape; the full attribute values of the first turn's spans and logs (each cut at 300 chars); and
"where the scenario's texts are": which span attribute or log field holds turn 1's question,
answer, retrieved texts, session id, user id and agent name.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import scenario
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"
CUT = 300
# The attribute a library uses to say what kind of span it is, in the order they are looked for.
KIND_KEYS = ("openinference.span.kind", "traceloop.span.kind", "gen_ai.operation.name")


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def attrs_of(kvs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


def cut(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\n", "\\n")
    return text if len(text) <= CUT else text[:CUT] + f"… ({len(text)} chars)"


@dataclass
class SpanRow:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    scope: str
    start: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    # "ERROR: <message>" / "OK", empty when unset (tool errors live here in some frameworks)
    status: str = ""

    @property
    def label(self) -> str:
        lib_kind = next(
            (f"{k}={self.attributes[k]}" for k in KIND_KEYS if k in self.attributes), ""
        )
        return f"`{self.name}` ({self.kind}{', ' + lib_kind if lib_kind else ''})"


@dataclass
class LogRow:
    trace_id: str
    span_id: str
    event_name: str
    scope: str
    attributes: dict[str, Any]
    body: Any


@dataclass
class Decoded:
    spans: list[SpanRow] = field(default_factory=list)
    logs: list[LogRow] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)


def _status(span: Span) -> str:
    if not span.status.code:
        return ""
    code = "ERROR" if span.status.code == 2 else "OK"
    return f"{code}: {span.status.message}" if span.status.message else code


def decode(folder: Path) -> Decoded:
    out = Decoded()
    for path in sorted(folder.glob("*-traces.pb")) + sorted(folder.glob("*-logs.pb")):
        if path.name.endswith("-traces.pb"):
            treq = ExportTraceServiceRequest.FromString(path.read_bytes())
            for rs in treq.resource_spans:
                out.resources.append(attrs_of(rs.resource.attributes))
                for ss in rs.scope_spans:
                    scope = f"{ss.scope.name} {ss.scope.version}".strip()
                    for s in ss.spans:
                        out.spans.append(
                            SpanRow(
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                s.name,
                                Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                                scope,
                                s.start_time_unix_nano,
                                attrs_of(s.attributes),
                                [(e.name, attrs_of(e.attributes)) for e in s.events],
                                _status(s),
                            )
                        )
        else:
            lreq = ExportLogsServiceRequest.FromString(path.read_bytes())
            for rl in lreq.resource_logs:
                out.resources.append(attrs_of(rl.resource.attributes))
                for sl in rl.scope_logs:
                    scope = f"{sl.scope.name} {sl.scope.version}".strip()
                    for r in sl.log_records:
                        attrs = attrs_of(r.attributes)
                        # Newer SDKs put the event name in the record's own field, older
                        # ones in an ``event.name`` attribute: say which, readers need both.
                        if r.event_name:
                            name = f"{r.event_name} (event_name field)"
                        else:
                            name = f"{attrs.get('event.name', '(no event name)')} (attribute)"
                        out.logs.append(
                            LogRow(
                                r.trace_id.hex(),
                                r.span_id.hex(),
                                name,
                                scope,
                                attrs,
                                value_of(r.body),
                            )
                        )
    out.spans.sort(key=lambda s: s.start)
    return out


def first_trace(decoded: Decoded) -> str | None:
    roots = [s for s in decoded.spans if not s.parent_id] or decoded.spans
    return min(roots, key=lambda s: s.start).trace_id if roots else None


def where_found(decoded: Decoded, trace_id: str | None, needle: str) -> list[str]:
    """Places in the first trace (spans and logs) whose value holds ``needle``."""
    names = {s.span_id: s.name for s in decoded.spans}
    hits = []
    for s in decoded.spans:
        if s.trace_id != trace_id:
            continue
        hits += [
            f"span `{s.name}` attr `{k}`"
            for k, v in s.attributes.items()
            if needle in (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
        ]
        hits += [
            f"span `{s.name}` event `{n}` attr `{k}`"
            for n, a in s.events
            for k, v in a.items()
            if needle in json.dumps(v, ensure_ascii=False)
        ]
    for r in decoded.logs:
        if r.trace_id != trace_id:
            continue
        owner = names.get(r.span_id, r.span_id)
        hits += [
            f"log `{r.event_name}` (span `{owner}`) attr `{k}`"
            for k, v in r.attributes.items()
            if needle in json.dumps(v, ensure_ascii=False)
        ]
        if needle in json.dumps(r.body, ensure_ascii=False):
            hits.append(f"log `{r.event_name}` (span `{owner}`) body")
    return hits


def tree(decoded: Decoded, trace_id: str | None) -> list[str]:
    spans = [s for s in decoded.spans if s.trace_id == trace_id]
    ids = {s.span_id for s in spans}
    children: dict[str, list[SpanRow]] = defaultdict(list)
    for s in spans:
        children[s.parent_id if s.parent_id in ids else ""].append(s)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for s in children[parent]:
            lines.append(f"{'  ' * depth}- {s.label} scope `{s.scope}`")
            walk(s.span_id, depth + 1)

    walk("", 0)
    return lines


def summary(folder: Path) -> str:
    manifest = json.loads((folder / "manifest.json").read_text())
    decoded = decode(folder)
    first = first_trace(decoded)
    turn = scenario.TURNS[0]
    out = [f"# {folder.name}", ""]
    out.append(f"Library `{manifest['library']}`; content capture: {manifest['content_capture']}.")
    pins = ", ".join(f"{k}=={v}" for k, v in manifest["packages"].items())
    out.append(f"Pinned: {pins}. Python {manifest['python']}, recorded {manifest['date']}.")
    traces = {s.trace_id for s in decoded.spans}
    out.append(
        f"Bodies: {manifest['bodies']['traces']} traces, {manifest['bodies']['logs']} "
        f"logs; {len(decoded.spans)} spans in {len(traces)} traces; "
        f"{len(decoded.logs)} log records; "
        f"{manifest['chat_completion_calls']} chat completion calls."
    )
    for note in manifest.get("notes", []):
        out.append(f"- Note: {note}")
    out += ["", "## Resource", ""]
    keys = sorted({k for r in decoded.resources for k in r})
    merged = {k: v for r in decoded.resources for k, v in r.items()}
    out += [f"- `{k}` = {cut(merged[k])}" for k in keys]
    if manifest.get("scenario") == "agent":
        # the agent scenario (agent_scenario.py) has its own texts: say where each step lives
        from agent_summary import sections

        out += ["", *sections(decoded, manifest), *tail_sections(decoded, first)]
        return "\n".join(out).rstrip() + "\n"
    out += ["", "## Where turn 1's texts are", ""]
    needles = {
        "question (input)": turn.question,
        "answer (output)": turn.answer,
        "retrieved text": scenario.DOCUMENTS[turn.doc_ids[0]],
        "session id": scenario.SESSION_ID,
        "user id": scenario.USER_ID,
        "agent name": scenario.AGENT_NAME,
    }
    for label, needle in needles.items():
        hits = where_found(decoded, first, needle)
        out.append(f"- {label}: " + ("; ".join(hits) if hits else "**nowhere**"))
    out += ["", "## Span tree of turn 1", "", *tree(decoded, first)]
    out += tail_sections(decoded, first)
    return "\n".join(out).rstrip() + "\n"


def tail_sections(decoded: Decoded, first: str | None) -> list[str]:
    """The sections every summary ends with: attribute keys per span shape, log records per
    event name, turn 1 in full."""
    out = ["", "## Attribute keys per span shape (all turns)", ""]
    shapes: dict[str, list[SpanRow]] = defaultdict(list)
    for s in decoded.spans:
        shapes[f"{s.label} scope `{s.scope}`"].append(s)
    for label, rows in shapes.items():
        out.append(f"### {label}: {len(rows)} spans")
        out.append("")
        keys = sorted({k for r in rows for k in r.attributes})
        out.append(", ".join(f"`{k}`" for k in keys) or "(no attributes)")
        events = sorted({n for r in rows for n, _ in r.events})
        if events:
            out.append("")
            described = []
            for n in events:
                event_keys = sorted({k for r in rows for e, a in r.events if e == n for k in a})
                described.append(f"`{n}` ({', '.join(event_keys)})")
            out.append("Span events: " + ", ".join(described))
        out.append("")
    if decoded.logs:
        out += ["## Log records per event name (all turns)", ""]
        by_name: dict[str, list[LogRow]] = defaultdict(list)
        for r in decoded.logs:
            by_name[r.event_name].append(r)
        for name, logs in by_name.items():
            keys = sorted({k for r in logs for k in r.attributes})
            body_keys = sorted({k for r in logs if isinstance(r.body, dict) for k in r.body})
            out.append(
                f"- `{name}` x{len(logs)} scope `{logs[0].scope}`: attributes "
                + ", ".join(f"`{k}`" for k in keys)
                + (
                    f"; body keys {', '.join(f'`{k}`' for k in body_keys)}"
                    if body_keys
                    else f"; body {type(logs[0].body).__name__}"
                )
            )
        out.append("")
    out += ["## Turn 1 in full", ""]
    names = {s.span_id: s.name for s in decoded.spans}
    for s in decoded.spans:
        if s.trace_id != first:
            continue
        out.append(f"### {s.label}")
        out.append("")
        out += [f"- `{k}` = {cut(v)}" for k, v in sorted(s.attributes.items())]
        for n, a in s.events:
            out.append(f"- event `{n}`: {cut(a)}")
        out.append("")
    for r in decoded.logs:
        if r.trace_id != first:
            continue
        out.append(f"### log `{r.event_name}` (span `{names.get(r.span_id, r.span_id)}`)")
        out.append("")
        out += [f"- `{k}` = {cut(v)}" for k, v in sorted(r.attributes.items())]
        out.append(f"- body = {cut(r.body)}")
        out.append("")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recordings", nargs="*")
    parser.add_argument("--library")
    args = parser.parse_args()
    # agent-scenario recordings live one folder down (agent_harness.FIXTURES_DIR)
    folders = [
        FIXTURES_DIR / r if (FIXTURES_DIR / r).exists() else FIXTURES_DIR / "agents" / r
        for r in args.recordings
    ] or sorted(
        p.parent
        for pattern in ("*/manifest.json", "agents/*/manifest.json")
        for p in FIXTURES_DIR.glob(pattern)
    )
    if args.library:
        folders = [
            f
            for f in folders
            if json.loads((f / "manifest.json").read_text())["library"] == args.library
        ]
    for folder in folders:
        (folder / "SUMMARY.md").write_text(summary(folder))
        print(f"wrote {folder / 'SUMMARY.md'}")


if __name__ == "__main__":
    main()
