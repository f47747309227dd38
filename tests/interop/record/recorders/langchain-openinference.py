"""Record the scenario's LangChain RAG chain traced by OpenInference's LangChain instrumentor.

OpenInference in its default mode (TraceConfig defaults: nothing hidden, GenAI semconv
attributes off). The session is OpenInference's own ``using_attributes(session_id=...,
user_id=...)`` context (the same as ``using_session`` plus ``using_user``): every span started
inside gets ``session.id`` / ``user.id``. Turn 5 runs under ``using_user`` only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import harness
import scenario
from openinference.instrumentation import using_attributes, using_user
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def _load_langchain_rag():  # type: ignore[no-untyped-def]
    # Recorders run with PYTHONSAFEPATH and their folder must stay off sys.path (recorders/
    # openinference.py would hide the namespace package), so the shared chain module beside
    # this file is loaded by its path.
    path = Path(__file__).resolve().parent / "langchain_rag.py"
    spec = importlib.util.spec_from_file_location("langchain_rag", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["langchain_rag"] = module
    spec.loader.exec_module(module)
    return module


langchain_rag = _load_langchain_rag()

MODES = {
    "langchain-openinference": harness.Mode(
        content_capture="on: OpenInference TraceConfig defaults (no OPENINFERENCE_HIDE_* set)"
    ),
}


def record(rec: harness.Recording) -> None:
    provider = TracerProvider(
        resource=Resource.create({"service.name": "interop-langchain-openinference"})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    chain = langchain_rag.build_chain(rec.openai_base_url)
    outputs = []
    for turn in scenario.TURNS:
        if turn.session_id is not None:
            with using_attributes(session_id=turn.session_id, user_id=scenario.USER_ID):
                outputs.append(chain.invoke(turn.question))
        else:
            with using_user(scenario.USER_ID):
                outputs.append(chain.invoke(turn.question))
    LangChainInstrumentor().uninstrument()
    provider.force_flush()
    provider.shutdown()
    langchain_rag.check_outputs(outputs)
    rec.note(
        "agent turn: the outer LCEL RunnableSequence named 'support-agent'; OpenInference marks a"
        " run whose name contains 'agent' as openinference.span.kind=AGENT"
    )
    rec.note(
        "retriever span (RETRIEVER) sits under the RunnableParallel branch, not beside the LLM"
        " span; the LLM span's preceding siblings are chain spans (ChatPromptTemplate)"
    )
    rec.note(
        "session/user via openinference.instrumentation.using_attributes -> session.id, user.id"
    )


if __name__ == "__main__":
    harness.main("langchain-openinference", MODES, record)
