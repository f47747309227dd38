"""Record the interop scenario as a Haystack RAG pipeline, traced by Haystack's own tracer.

The pipeline is Haystack's usual retrieval-augmented shape: ``InMemoryBM25Retriever`` over an
``InMemoryDocumentStore`` holding the three scenario documents -> ``ChatPromptBuilder`` (the
scenario's system prompt with the retrieved texts, then the question) -> ``OpenAIChatGenerator``
at the fake server (chat completions). One chat completion per turn.

Tracing: Haystack 3 no longer ships an OpenTelemetry tracer in ``haystack-ai``; its native one
moved to the ``opentelemetry-haystack`` integration, whose documented use is the
``OpenTelemetryConnector`` component added to the pipeline unconnected (it calls
``haystack.tracing.enable_tracing(OpenTelemetryTracer(...))`` on the global tracer provider).
Content capture is ``HAYSTACK_CONTENT_TRACING_ENABLED=true`` (read when haystack is imported).
The spans carry Haystack's own ``haystack.*`` tags, no OpenInference or GenAI semconv.

Retrieval is made deterministic with the retriever's runtime ``filters`` (the turn's document
ids) and ``top_k``; ``bm25_algorithm="BM25Okapi"`` keeps zero-score documents (the default
BM25L drops them, and the off-topic turn 3 shares no word with its document).

Sessions: Haystack has no session, user or agent-name notion. A team opens its own span per turn
with the Haystack tracer API (``haystack.tracing.tracer.trace(name, tags=...)``, the documented
``Tracer`` interface) named after the agent, tagged with OpenTelemetry's general ``session.id``
and ``user.id`` attributes; the pipeline's spans nest under it. Run by ``record.sh haystack``.
"""

from __future__ import annotations

import json

import harness
import scenario
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

MODES = {
    "haystack": harness.Mode(
        "on: HAYSTACK_CONTENT_TRACING_ENABLED=true",
        # telemetry off: haystack otherwise posts usage events to its vendor at import and run
        {"HAYSTACK_CONTENT_TRACING_ENABLED": "true", "HAYSTACK_TELEMETRY_ENABLED": "False"},
    )
}
SYSTEM_TEMPLATE = scenario.SYSTEM_PROMPT_TEMPLATE.format(
    context="{{ documents | map(attribute='content') | join('\\n') }}"
)


def run_turns(rec: harness.Recording) -> list[str]:
    # haystack reads HAYSTACK_CONTENT_TRACING_ENABLED at import: imported after the mode's env
    from haystack import Document, Pipeline, tracing
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils import Secret
    from haystack_integrations.components.connectors.opentelemetry import OpenTelemetryConnector

    store = InMemoryDocumentStore(bm25_algorithm="BM25Okapi")
    store.write_documents(
        [Document(id=doc_id, content=text) for doc_id, text in scenario.DOCUMENTS.items()]
    )
    pipeline = Pipeline()
    pipeline.add_component("tracer", OpenTelemetryConnector())
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=store))
    pipeline.add_component(
        "prompt_builder",
        ChatPromptBuilder(
            template=[
                ChatMessage.from_system(SYSTEM_TEMPLATE),
                ChatMessage.from_user("{{ question }}"),
            ],
            required_variables=["documents", "question"],
        ),
    )
    pipeline.add_component(
        "llm",
        OpenAIChatGenerator(
            api_key=Secret.from_token("sk-interop-fake"),
            model=scenario.MODEL,
            api_base_url=rec.openai_base_url,
        ),
    )
    pipeline.connect("retriever.documents", "prompt_builder.documents")
    pipeline.connect("prompt_builder.prompt", "llm.messages")
    outputs = []
    for turn in scenario.TURNS:
        tags = {"user.id": scenario.USER_ID}
        if turn.session_id:
            tags["session.id"] = turn.session_id
        with tracing.tracer.trace(scenario.AGENT_NAME, tags=tags):
            result = pipeline.run(
                {
                    "retriever": {
                        "query": turn.question,
                        "filters": {"field": "id", "operator": "in", "value": list(turn.doc_ids)},
                        "top_k": len(turn.doc_ids),
                    },
                    "prompt_builder": {"question": turn.question},
                }
            )
        outputs.append(result["llm"]["replies"][0].text or "")
    return outputs


def record(rec: harness.Recording) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "interop-haystack"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    # the connector takes its tracer from the global provider, as its documentation shows
    trace.set_tracer_provider(provider)
    outputs = run_turns(rec)
    provider.force_flush()
    provider.shutdown()
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected pipeline outputs: {json.dumps(outputs)}")
    rec.note(
        "haystack-ai 3.x has no OpenTelemetry tracer of its own any more: the native tracer is"
        " the opentelemetry-haystack integration's OpenTelemetryConnector (a pipeline component"
        " left unconnected; its own 'haystack.component.run' span per run)"
    )
    rec.note(
        "RAG pipeline, not the Agent component: InMemoryBM25Retriever (BM25Okapi, runtime"
        " filters on the turn's document ids, top_k = their count) -> ChatPromptBuilder (system"
        " prompt with the retrieved texts, user question) -> OpenAIChatGenerator; one chat"
        " completion per turn; document scores are BM25Okapi's (0.0 over a one-document"
        " filtered set), not 0.9"
    )
    rec.note(
        "session, user and agent name: Haystack has none; each turn runs inside a span opened"
        " with haystack.tracing.tracer.trace('support-agent', tags={'session.id': 'sess-42',"
        " 'user.id': 'user-7'}) (OpenTelemetry's general session.id / user.id); turn 5 has no"
        " session.id tag"
    )


if __name__ == "__main__":
    harness.main("haystack", MODES, record)
