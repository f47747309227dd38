"""Record the scenario through LiteLLM with its own OpenTelemetry callback (``callbacks=["otel"]``).

LiteLLM is a client, not an agent framework: the agent turn and the retrieve step are the
application's own plain OpenTelemetry spans (GenAI semconv names: ``invoke_agent support-agent``
and ``retrieval``, documents as id/score per the semconv), and ``litellm.completion`` runs inside.
The app sets up its TracerProvider with the standard OTLP/HTTP exporter first; LiteLLM's callback
(legacy ``litellm.integrations.opentelemetry.OpenTelemetry``, the default unless
``LITELLM_OTEL_V2`` is set) finds that SDK provider and reuses it, so its spans nest under the
app's (``USE_OTEL_LITELLM_REQUEST_SPAN=true``, else LiteLLM makes no span of its own under an
active parent, see the notes). The documented env switches are set all the same
(``OTEL_EXPORTER=otlp_http``, ``OTEL_ENDPOINT`` = the capture server), as LiteLLM would use them
if it made the provider.

Session: ``metadata={"session_id": ...}`` on the completion call (LiteLLM's trace control; the
V2 logger maps it to ``gen_ai.conversation.id``). Content: LiteLLM's default (message logging
on; ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` unset).
"""

from __future__ import annotations

import json
import os
import time

import harness
import scenario
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODES = {
    "litellm-otel": harness.Mode(
        content_capture="on: LiteLLM default (message logging on, turn_off_message_logging=False)",
        env={
            "OTEL_EXPORTER": "otlp_http",
            "USE_OTEL_LITELLM_REQUEST_SPAN": "true",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        },
    ),
}


def run_turn(tracer: trace.Tracer, turn: scenario.Turn) -> str:
    import litellm

    agent_attributes: dict[str, str] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": scenario.AGENT_NAME,
    }
    metadata: dict[str, str] = {"user_id": scenario.USER_ID}
    if turn.session_id is not None:
        agent_attributes["gen_ai.conversation.id"] = turn.session_id
        metadata["session_id"] = turn.session_id
    with tracer.start_as_current_span(
        f"invoke_agent {scenario.AGENT_NAME}", attributes=agent_attributes
    ):
        with tracer.start_as_current_span("retrieval") as retrieval:
            docs = turn.documents()
            retrieval.set_attribute("gen_ai.operation.name", "retrieval")
            retrieval.set_attribute("gen_ai.retrieval.query.text", turn.question)
            retrieval.set_attribute(
                "gen_ai.retrieval.documents",
                json.dumps([{"id": d.id, "score": d.score} for d in docs]),
            )
        response = litellm.completion(
            model=f"openai/{scenario.MODEL}",
            api_base=os.environ["OPENAI_BASE_URL"],
            api_key="sk-interop-fake",
            messages=turn.messages(),
            user=scenario.USER_ID,
            metadata=metadata,
        )
        return str(response.choices[0].message.content)


def record(rec: harness.Recording) -> None:
    os.environ["OTEL_ENDPOINT"] = rec.otlp_endpoint
    provider = TracerProvider(resource=Resource.create({"service.name": "interop-litellm"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    trace.set_tracer_provider(provider)
    import litellm

    litellm.callbacks = ["otel"]
    tracer = trace.get_tracer("interop-app")
    outputs = [run_turn(tracer, turn) for turn in scenario.TURNS]
    # LiteLLM runs its success callbacks on a worker thread: let them finish before flushing.
    time.sleep(2)
    provider.force_flush()
    provider.shutdown()
    if outputs != [t.answer for t in scenario.TURNS]:
        raise SystemExit(f"unexpected outputs: {outputs}")
    rec.note(
        "the agent turn ('invoke_agent support-agent') and the retrieval step ('retrieval',"
        " documents as semconv id/score without text) are the app's own plain spans: LiteLLM"
        " has no agent or retrieval notion; the retrieved text reaches the LLM span only in"
        " the system message"
    )
    rec.note(
        "LiteLLM reuses the app's global SDK TracerProvider (it adds no exporter of its own"
        " then); OTEL_EXPORTER=otlp_http / OTEL_ENDPOINT are set as documented anyway"
    )
    rec.note(
        "USE_OTEL_LITELLM_REQUEST_SPAN=true: without it LiteLLM, finding an active parent span,"
        " creates no litellm_request span and writes its attributes onto the parent (the app's"
        " agent span) from its callback thread, after that span has ended: they are dropped"
        " ('Setting attribute on ended span'), only raw_gen_ai_request remains"
    )
    rec.note(
        "session: the default (legacy) OTel logger drops metadata.session_id; no session"
        " attribute on LiteLLM's spans, only on the app's agent span (gen_ai.conversation.id)."
        " The opt-in typed logger (LITELLM_OTEL_V2=true) maps it to gen_ai.conversation.id but"
        " builds its own provider and exported nothing to the capture server here"
    )
    rec.note("session via completion(metadata={'session_id': 'sess-42', 'user_id': 'user-7'})")


if __name__ == "__main__":
    harness.main("litellm-otel", MODES, record)
