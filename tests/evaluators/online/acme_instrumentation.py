"""A made-up instrumentation ("acme"): invented scopes, attribute names and message shape, the
interop scenario's five turns, as OTLP bodies a worker receives. No dialect reads it; the
readers below do (the same in TOML, in Python, and as ``explain --suggest-reader`` gives them).

Per turn, one trace under scope ``acme.assist``:

* ``acme.turn`` (root): ``acme.ask`` the question, ``acme.reply`` JSON ``{"said": ..., "status":
  "done"}``, ``acme.thread_id`` the session;
* ``acme.lookup``: ``acme.hits`` JSON ``{"items": [{"ref": ..., "body": ...}]}``;
* ``acme.model`` (scope ``acme.assist.models``): ``acme.exchange`` JSON ``{"convo": [messages]}``
  and an event ``acme.completion`` whose ``acme.payload`` is JSON
  ``{"choice": {"txt": "[[ ## reply ## ]] <answer>"}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.interop.conftest import scenario

RECORDING = "acme-made-up"

READERS_TOML = """\
[[readers]]
name = "acme-model"
kind = "llm"
[readers.match]
scope = "acme.assist.models"
span_name = "acme.model*"
[readers.input]
attribute = "acme.exchange"
path = "$.convo"
transforms = ["last_message:user"]
[readers.output]
event = "acme.completion"
path = '$["acme.payload"].choice.txt'
transforms = ["strip_markers"]

[[readers]]
name = "acme-lookup"
kind = "retriever"
[readers.match]
scope = "acme.assist"
span_name = "acme.lookup"
[readers.context]
attribute = "acme.hits"
path = "$.items[*].body"

[[readers]]
name = "acme-turn"
kind = "agent"
[readers.match]
scope = "acme.assist"
span_name = "acme.turn"
attributes_exist = ["acme.ask"]
[readers.input]
attribute = "acme.ask"
[readers.output]
attribute = "acme.reply"
path = "$.said"
[readers.session]
attribute = "acme.thread_id"
"""

READERS: list[dict[str, Any]] = [
    {
        "name": "acme-model",
        "kind": "llm",
        "match": {"scope": "acme.assist.models", "span_name": "acme.model*"},
        "input": {
            "attribute": "acme.exchange",
            "path": "$.convo",
            "transforms": ["last_message:user"],
        },
        "output": {
            "event": "acme.completion",
            "path": '$["acme.payload"].choice.txt',
            "transforms": ["strip_markers"],
        },
    },
    {
        "name": "acme-lookup",
        "kind": "retriever",
        "match": {"scope": "acme.assist", "span_name": "acme.lookup"},
        "context": {"attribute": "acme.hits", "path": "$.items[*].body"},
    },
    {
        "name": "acme-turn",
        "kind": "agent",
        "match": {
            "scope": "acme.assist",
            "span_name": "acme.turn",
            "attributes_exist": ["acme.ask"],
        },
        "input": {"attribute": "acme.ask"},
        "output": {"attribute": "acme.reply", "path": "$.said"},
        "session": {"attribute": "acme.thread_id"},
    },
]


def acme_spans() -> list[Any]:
    """The scenario's five turns as the made-up instrumentation writes them (SDK spans)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "acme-shop"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = provider.get_tracer("acme.assist", "2.1.0")
    models = provider.get_tracer("acme.assist.models", "2.1.0")
    for turn in scenario.TURNS:
        root_attrs: dict[str, Any] = {
            "acme.ask": turn.question,
            "acme.reply": json.dumps({"said": turn.answer, "status": "done"}),
        }
        if turn.session_id:
            root_attrs["acme.thread_id"] = turn.session_id
        with app.start_as_current_span("acme.turn", attributes=root_attrs):
            hits = [{"ref": d.id, "body": d.text} for d in turn.documents()]
            with app.start_as_current_span(
                "acme.lookup", attributes={"acme.hits": json.dumps({"items": hits})}
            ):
                pass
            exchange = {"convo": turn.messages()}
            with models.start_as_current_span(
                "acme.model.call", attributes={"acme.exchange": json.dumps(exchange)}
            ) as call:
                payload = {"choice": {"txt": f"[[ ## reply ## ]] {turn.answer}"}}
                call.add_event("acme.completion", {"acme.payload": json.dumps(payload)})
    provider.shutdown()
    return list(exporter.get_finished_spans())


def write_recording(folder: Path) -> Path:
    """The made-up recording as ``tests/interop`` replays one: ``<folder>/acme-made-up/`` with
    one protobuf body per turn and a manifest."""
    out = folder / RECORDING
    out.mkdir(parents=True, exist_ok=True)
    spans = acme_spans()
    by_trace: dict[int, list[Any]] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)
    for n, group in enumerate(by_trace.values(), start=1):
        (out / f"{n:03d}-traces.pb").write_bytes(encode_spans(group).SerializeToString())
    manifest = {
        "recording": RECORDING,
        "library": "acme (made up)",
        "turns": len(scenario.TURNS),
        "chat_completion_calls": len(scenario.TURNS),
    }
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return out
