"""Record the scenario's LangChain RAG chain traced by OpenLLMetry (traceloop-sdk).

``Traceloop.init`` with the standard OTLP/HTTP span exporter pointed at the capture server and
its default instrument set (every instrumentation it finds installed: here OpenAI; LangChain is
instrumented by the recorder, see below).
The session is a traceloop association property: ``Traceloop.set_association_properties(
{"session_id": ..., "user_id": ...})`` before each turn (it replaces the context value, so
turn 5 gets only ``user_id``). Content capture: ``TRACELOOP_TRACE_CONTENT=true`` (its default),
and ``use_attributes`` left at its default (messages as span attributes, not log events).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import harness
import scenario
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from traceloop.sdk import Traceloop

MODES = {
    "langchain-openllmetry": harness.Mode(
        content_capture="on: TRACELOOP_TRACE_CONTENT=true (the default)",
        env={"TRACELOOP_TRACE_CONTENT": "true", "TRACELOOP_TELEMETRY": "false"},
    ),
}


def _load_langchain_rag() -> ModuleType:
    # Recorders run with PYTHONSAFEPATH and their folder stays off sys.path (a recorder named
    # like a package would hide it), so the shared chain module beside this file is loaded by
    # its path.
    path = Path(__file__).resolve().parent / "langchain_rag.py"
    spec = importlib.util.spec_from_file_location("langchain_rag", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["langchain_rag"] = module
    spec.loader.exec_module(module)
    return module


def record(rec: harness.Recording) -> None:
    langchain_rag = _load_langchain_rag()
    Traceloop.init(
        app_name="interop-langchain-openllmetry",
        exporter=OTLPSpanExporter(endpoint=rec.traces_url),
        telemetry_enabled=False,
    )
    # traceloop-sdk turns its LangChain instrumentor on only when the `langchain` or `langgraph`
    # distribution is installed; this app has langchain-core + langchain-openai only, so the
    # recorder does what init would have done (same class, same use_attributes default).
    instrumentor = LangchainInstrumentor(use_attributes=True)
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
    chain = langchain_rag.build_chain(rec.openai_base_url)
    outputs = []
    for turn in scenario.TURNS:
        properties = {"user_id": scenario.USER_ID}
        if turn.session_id is not None:
            properties["session_id"] = turn.session_id
        Traceloop.set_association_properties(properties)
        outputs.append(chain.invoke(turn.question))
    provider = trace.get_tracer_provider()
    provider.force_flush()  # type: ignore[attr-defined]
    provider.shutdown()  # type: ignore[attr-defined]
    langchain_rag.check_outputs(outputs)
    rec.note(
        "agent turn: the outer LCEL RunnableSequence named 'support-agent' is the root chain, so"
        " traceloop marks it traceloop.span.kind=workflow (inner chains and the retriever: task)"
    )
    rec.note(
        "Traceloop.init alone does not instrument LangChain unless the 'langchain' or 'langgraph'"
        " distribution is installed (langchain-core alone is not enough); the recorder calls"
        " LangchainInstrumentor(use_attributes=True).instrument() itself, as init would"
    )
    rec.note(
        "session/user via Traceloop.set_association_properties -> "
        "traceloop.association.properties.session_id / .user_id"
    )


if __name__ == "__main__":
    harness.main("langchain-openllmetry", MODES, record)
