"""Record the scenario traced by the official OpenTelemetry GenAI stack.

The chat completion span (and, in event mode, its ``gen_ai.client.inference.operation.details``
log record) comes from ``opentelemetry-instrumentation-openai-v2`` on the latest experimental
conventions (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``).  The agent turn and
the retrieval follow the current GenAI semantic conventions (an INTERNAL ``invoke_agent
support-agent`` span with ``gen_ai.conversation.id``; a CLIENT ``retrieval support-docs`` span
with ``gen_ai.data_source.id``, ``gen_ai.retrieval.query.text`` and ``gen_ai.retrieval.documents``
as ``[{id, score}]``).  They are made with ``opentelemetry-util-genai``'s ``TelemetryHandler``,
the contrib helper the openai-v2 instrumentation itself is built on, rather than raw
``start_span`` calls: it writes the conventions' names, kinds and attributes, obeys the same
content-capture switch.  openai-v2 2.4b0 imports ``opentelemetry.util.genai.instruments``, which
util-genai dropped in 1.2b0, so util-genai is pinned at 1.1b0 (its API: ``conversation_id`` is
an attribute of the agent invocation and is not carried to the chat span).
Run by ``record.sh otel-genai``.
"""

from __future__ import annotations

from typing import Any

import harness
import scenario
from openai import OpenAI
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text

DATA_SOURCE = "support-docs"
LATEST = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
EMIT = "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT"

MODES = {
    "otel-genai-span": harness.Mode(
        f"on, on spans: {CAPTURE}=span_only", {**LATEST, CAPTURE: "span_only", EMIT: "false"}
    ),
    "otel-genai-event": harness.Mode(
        f"on, as log records: {CAPTURE}=event_only, {EMIT}=true",
        {**LATEST, CAPTURE: "event_only", EMIT: "true"},
    ),
    "otel-genai-nocontent": harness.Mode(
        f"off: {CAPTURE}=no_content", {**LATEST, CAPTURE: "no_content", EMIT: "false"}
    ),
}


def record(rec: harness.Recording) -> None:
    resource = Resource({"service.name": "interop-otel-genai"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url))
    )
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=rec.logs_url))
    )
    OpenAIInstrumentor().instrument(
        tracer_provider=tracer_provider, logger_provider=logger_provider
    )
    handler = TelemetryHandler(tracer_provider=tracer_provider, logger_provider=logger_provider)
    client = OpenAI(base_url=rec.openai_base_url, api_key="sk-interop-fake")

    def retrieve(query: str) -> list[scenario.Document]:
        turn = scenario.turn_for_question(query)
        assert turn is not None
        docs = turn.documents()
        with handler.retrieval(data_source_id=DATA_SOURCE) as retrieval:
            retrieval.query_text = query
            # The conventions' document object: id and score (the text is not part of it).
            retrieval.documents = [{"id": d.id, "score": d.score} for d in docs]
            retrieval.top_k = 1
        return docs

    for turn in scenario.TURNS:
        with handler.invoke_local_agent(
            agent_name=scenario.AGENT_NAME, request_model=scenario.MODEL
        ) as agent:
            agent.conversation_id = turn.session_id
            # Required by the conventions; invoke_local_agent takes no provider argument.
            agent.attributes["gen_ai.provider.name"] = "openai"
            agent.input_messages = [InputMessage(role="user", parts=[Text(content=turn.question)])]
            docs = retrieve(turn.question)
            context = "\n".join(d.text for d in docs)
            messages: list[Any] = [
                {
                    "role": "system",
                    "content": scenario.SYSTEM_PROMPT_TEMPLATE.format(context=context),
                },
                {"role": "user", "content": turn.question},
            ]
            completion = client.chat.completions.create(model=scenario.MODEL, messages=messages)
            answer = completion.choices[0].message.content or ""
            agent.output_messages = [
                OutputMessage(role="assistant", parts=[Text(content=answer)], finish_reason="stop")
            ]
    rec.note(
        "agent and retrieval spans made with opentelemetry-util-genai's TelemetryHandler "
        "(1.1b0: the newest that openai-v2 2.4b0 imports); gen_ai.conversation.id is on the "
        "invoke_agent span only, not on the chat span"
    )
    rec.note("the system prompt stays a system message inside gen_ai.input.messages")
    tracer_provider.force_flush()
    logger_provider.force_flush()
    tracer_provider.shutdown()
    logger_provider.shutdown()


if __name__ == "__main__":
    harness.main("otel-genai", MODES, record)
