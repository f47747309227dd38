"""Record the scenario's OpenAI Agents SDK agent traced by the OTel GenAI-semconv bridge.

``opentelemetry-instrumentation-openai-agents-v2`` (opentelemetry-python-contrib) adds a
``GenAISemanticProcessor`` to the Agents SDK's trace processors; it maps each SDK trace and span to
an OpenTelemetry span with GenAI semantic-convention attributes, exported to the capture server.

Content capture: the instrumentor reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
(``span_only`` / ``event_only`` / ``span_and_event`` / true / false; unset means
``span_and_event``). This recording sets ``span_and_event``; in 0.1.0 the event half is a no-op
(``_emit_content_events`` logs "currently disabled" and returns), so the content is on span
attributes only and no log records are sent.

The instrumentor appends its processor to the ones already registered, which include the SDK's
default exporter to OpenAI's tracing backend: ``set_trace_processors([])`` empties the list first,
so only the OTel path remains (``set_tracing_disabled`` would stop the bridge too).

The agent (``openai_agents_app.py``, beside this file) is the same as the
openai-agents-openinference recording's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import harness
from agents import set_trace_processors
from agents.tracing import get_trace_provider
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def _load_app() -> ModuleType:
    # Recorders run with PYTHONSAFEPATH and their folder stays off sys.path, so the shared
    # agent module beside this file is loaded by its path (as langchain_rag.py is).
    path = Path(__file__).resolve().parent / "openai_agents_app.py"
    spec = importlib.util.spec_from_file_location("openai_agents_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["openai_agents_app"] = module
    spec.loader.exec_module(module)
    return module


app = _load_app()

MODES = {
    "openai-agents-otel": harness.Mode(
        f"on: {CAPTURE}=span_and_event (0.1.0 writes content on spans only)",
        {CAPTURE: "span_and_event"},
    ),
}


def record(rec: harness.Recording) -> None:
    # Resource(...) rather than Resource.create: no random service.instance.id in the fixture
    provider = TracerProvider(resource=Resource({"service.name": "interop-openai-agents-otel"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    set_trace_processors([])  # drop the SDK's default upload to OpenAI's tracing backend
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    processors = get_trace_provider()._multi_processor._processors  # what the SDK will call
    names = [type(p).__name__ for p in processors]
    if names != ["GenAISemanticProcessor"]:
        raise SystemExit(f"unexpected Agents SDK trace processors: {names}")
    app.run_turns(rec.openai_base_url)
    provider.force_flush()
    provider.shutdown()
    for note in app.NOTES:
        rec.note(note)
    rec.note(
        "tracing: set_trace_processors([]) then OpenAIAgentsInstrumentor().instrument(...)"
        " (it appends to the registered processors); checked: only GenAISemanticProcessor"
        " registered, so nothing went to OpenAI's backend"
    )
    rec.note(
        f"{CAPTURE}=span_and_event: 0.1.0 emits no content events (its _emit_content_events is"
        " a no-op), so content is in span attributes only and no log record is sent"
    )


if __name__ == "__main__":
    harness.main("openai-agents-otel", MODES, record)
