"""Record the scenario's LlamaIndex workflow agent traced by OpenInference (LlamaIndexInstrumentor).

The agent is ``recorders/llamaindex_agent.py`` (a ``FunctionAgent`` named "support-agent" with a
``retrieve_docs`` RetrieverTool over a scenario retriever, ``OpenAILike`` at the fake server).
``LlamaIndexInstrumentor`` (openinference-instrumentation-llama-index) in its default mode
(TraceConfig defaults: nothing hidden) turns LlamaIndex's own instrumentation spans into OTel
spans. The session and user are OpenInference's ``using_session`` / ``using_user`` contexts around
each ``agent.run``; turn 5 runs under ``using_user`` only.
"""

from __future__ import annotations

import importlib.util
import sys
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import harness
import scenario
from openinference.instrumentation import using_session, using_user
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODES = {
    "llamaindex-openinference": harness.Mode(
        content_capture="on: OpenInference TraceConfig defaults (no OPENINFERENCE_HIDE_* set)"
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


def _session(turn: scenario.Turn) -> ExitStack:
    stack = ExitStack()
    if turn.session_id is not None:
        stack.enter_context(using_session(turn.session_id))
    stack.enter_context(using_user(scenario.USER_ID))
    return stack


def record(rec: harness.Recording) -> None:
    llamaindex_agent = _load_llamaindex_agent()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "interop-llamaindex-openinference"})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    agent = llamaindex_agent.build_agent(rec.openai_base_url)
    outputs = llamaindex_agent.run_turns(agent, _session)
    LlamaIndexInstrumentor().uninstrument()
    provider.force_flush()
    provider.shutdown()
    llamaindex_agent.check_outputs(outputs)
    rec.note(
        "retrieval is a tool (RetrieverTool 'retrieve_docs'): two chat completions per turn (tool"
        " call, then the answer); the TOOL span holds a RETRIEVER span"
        " (ScenarioRetriever.aretrieve, retrieval.documents.N.document.*) and a nested RETRIEVER"
        " span for _retrieve"
    )
    rec.note(
        "no AGENT span: the turn's root is 'FunctionAgent.run' (CHAIN) whose input.value is the"
        " workflow's start state and output.value a StopEvent(...) repr; the agent name appears"
        " only inside event reprs (current_agent_name='support-agent')"
    )
    rec.note(
        "FunctionAgent streams by default: each model call is an LLM span"
        " 'OpenAILike.astream_chat' (input.value and tools only) around another"
        " 'OpenAILike.astream_chat' LLM span with llm.input_messages/llm.output_messages; a third"
        " LLM span 'OpenAILike._prepare_chat_with_tools' (no model call) precedes them"
    )
    rec.note(
        "system prompt is the agent's own instruction (no context): the documents reach the model"
        " as the tool message (llm.input_messages.3, role tool)"
    )
    rec.note("session/user via openinference.instrumentation.using_session / using_user")


if __name__ == "__main__":
    harness.main("llamaindex-openinference", MODES, record)
