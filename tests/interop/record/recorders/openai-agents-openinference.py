"""Record the scenario's OpenAI Agents SDK agent traced by OpenInference's instrumentor.

``OpenAIAgentsInstrumentor`` (openinference-instrumentation-openai-agents) registers a tracing
processor with the Agents SDK that turns each SDK trace and span into OpenTelemetry spans of an
``OITracer`` (default ``TraceConfig``: nothing hidden), exported to the capture server. It is
registered ``exclusive_processor=True`` (its default): it replaces the SDK's processors, so the
default upload to OpenAI's tracing backend is gone and only the OTel path remains.

The agent (``openai_agents_app.py``, beside this file) is the same as the openai-agents-otel
recording's. The retrieve tool is left a plain TOOL span: the instrumentor's
``tool_span_kinds={"retrieve_docs": "RETRIEVER"}`` option is not used (the default setup).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import harness
from agents.tracing import get_trace_provider
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


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
    "openai-agents-openinference": harness.Mode(
        "on (OpenInference default TraceConfig: nothing hidden; the SDK's"
        " trace_include_sensitive_data default True)"
    ),
}


def record(rec: harness.Recording) -> None:
    # Resource(...) rather than Resource.create: no random service.instance.id in the fixture
    provider = TracerProvider(
        resource=Resource({"service.name": "interop-openai-agents-openinference"})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    processors = get_trace_provider()._multi_processor._processors  # what the SDK will call
    names = [type(p).__name__ for p in processors]
    if names != ["OpenInferenceTracingProcessor"]:
        raise SystemExit(f"unexpected Agents SDK trace processors: {names}")
    app.run_turns(rec.openai_base_url)
    provider.force_flush()
    provider.shutdown()
    for note in app.NOTES:
        rec.note(note)
    rec.note(
        "tracing: OpenAIAgentsInstrumentor().instrument(tracer_provider=...) with its default"
        " exclusive_processor=True replaced the SDK's processors (checked: only"
        " OpenInferenceTracingProcessor registered), so nothing went to OpenAI's backend"
    )
    rec.note(
        "retrieve_docs is a TOOL span: the instrumentor's tool_span_kinds={'retrieve_docs':"
        " 'RETRIEVER'} option (documents from a list of {id, content, score} dicts) is not used"
    )


if __name__ == "__main__":
    harness.main("openai-agents-openinference", MODES, record)
