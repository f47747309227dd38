"""Record the scenario's LlamaIndex workflow agent traced by OpenLLMetry (traceloop-sdk).

The agent is ``recorders/llamaindex_agent.py`` (a ``FunctionAgent`` named "support-agent" with a
``retrieve_docs`` RetrieverTool over a scenario retriever, ``OpenAILike`` at the fake server).
``Traceloop.init`` with the standard OTLP/HTTP span exporter pointed at the capture server and its
default instrument set; the LlamaIndex instrumentor (opentelemetry-instrumentation-llamaindex,
LlamaIndex's dispatcher span handler) is switched on by the recorder, see below.

The session: the instrumentation alone has no session notion; traceloop-sdk's span processor copies
the context's association properties onto every span started, so the session and user are
``Traceloop.set_association_properties({"session_id": ..., "user_id": ...})`` before each turn (it
replaces the context value, so turn 5 gets only ``user_id``). Content capture:
``TRACELOOP_TRACE_CONTENT=true`` (its default); ``use_legacy_attributes`` left at its default
(messages as span attributes, not log events).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import harness
import scenario
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
from traceloop.sdk import Traceloop

MODES = {
    "llamaindex-openllmetry": harness.Mode(
        content_capture="on: TRACELOOP_TRACE_CONTENT=true (the default)",
        env={"TRACELOOP_TRACE_CONTENT": "true", "TRACELOOP_TELEMETRY": "false"},
    ),
}


def _load_llamaindex_agent() -> ModuleType:
    # Recorders run with PYTHONSAFEPATH and their folder stays off sys.path (a recorder named
    # like a package would hide it), so the shared agent module beside this file is loaded by
    # its path.
    path = Path(__file__).resolve().parent / "llamaindex_agent.py"
    spec = importlib.util.spec_from_file_location("llamaindex_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["llamaindex_agent"] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def _session(turn: scenario.Turn) -> Iterator[None]:
    properties = {"user_id": scenario.USER_ID}
    if turn.session_id is not None:
        properties["session_id"] = turn.session_id
    Traceloop.set_association_properties(properties)
    yield


def record(rec: harness.Recording) -> None:
    llamaindex_agent = _load_llamaindex_agent()
    Traceloop.init(
        app_name="interop-llamaindex-openllmetry",
        exporter=OTLPSpanExporter(endpoint=rec.traces_url),
        telemetry_enabled=False,
    )
    # traceloop-sdk turns its LlamaIndex instrumentor on only when the `llama-index` (or
    # `llama_index`) distribution is installed; this app has llama-index-core and the LLM
    # integration only, so the recorder does what init would have done (same class, defaults).
    instrumentor = LlamaIndexInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
    agent = llamaindex_agent.build_agent(rec.openai_base_url)
    outputs = llamaindex_agent.run_turns(agent, _session)
    provider = trace.get_tracer_provider()
    provider.force_flush()  # type: ignore[attr-defined]
    provider.shutdown()  # type: ignore[attr-defined]
    llamaindex_agent.check_outputs(outputs)
    rec.note(
        "Traceloop.init alone does not instrument LlamaIndex unless the 'llama-index' (or"
        " 'llama_index') distribution is installed (llama-index-core alone is not enough); the"
        " recorder calls LlamaIndexInstrumentor().instrument() itself, as init would"
    )
    rec.note(
        "retrieval is a tool (RetrieverTool 'retrieve_docs'): two chat completions per turn; every"
        " LlamaIndex span is traceloop.span.kind=task under one 'FunctionAgent.workflow' root"
        " (workflow); names are '<Class>.task', e.g. every workflow step is"
        " 'BaseWorkflowAgent.task'"
    )
    rec.note(
        "the LLM is OpenAILike, which the instrumentation does not hand to its OpenAI"
        " instrumentation (only class 'OpenAI' is): the model calls are 'OpenAILike.task' spans"
        " (gen_ai.input.messages / gen_ai.output.messages on the inner one of two nested spans),"
        " and the OpenAI client's own spans are suppressed"
    )
    rec.note(
        "the root 'FunctionAgent.workflow' span carries no traceloop.entity.input/output; the"
        " instrumentation logs 'Failed to detach context' (tokens made in another asyncio"
        " context) and 'Setting attribute on ended span' during the workflow's steps"
    )
    rec.note(
        "session/user via Traceloop.set_association_properties -> "
        "traceloop.association.properties.session_id / .user_id"
    )


if __name__ == "__main__":
    harness.main("llamaindex-openllmetry", MODES, record)
