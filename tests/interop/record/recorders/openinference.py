"""Record the scenario traced by OpenInference (default, flattened attribute mode).

The chat completion span comes from ``openinference-instrumentation-openai``; the agent turn and
the retrieval are made with OpenInference's own manual API: an ``OITracer`` and its
``@agent`` / ``@retriever`` decorators (span kinds AGENT and RETRIEVER), the documents set with
``get_retriever_attributes`` (``retrieval.documents.N.document.{id,score,content}``), the
session and user with ``using_session`` / ``using_user``.  Run by ``record.sh openinference``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import harness
import scenario
from openai import OpenAI
from openinference.instrumentation import (
    OITracer,
    TraceConfig,
    get_retriever_attributes,
    using_session,
    using_user,
)
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import SpanAttributes
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

HIDE = (
    "OPENINFERENCE_HIDE_INPUTS",
    "OPENINFERENCE_HIDE_OUTPUTS",
    "OPENINFERENCE_HIDE_INPUT_MESSAGES",
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES",
    "OPENINFERENCE_HIDE_INPUT_TEXT",
    "OPENINFERENCE_HIDE_OUTPUT_TEXT",
    "OPENINFERENCE_HIDE_RETRIEVAL_DOCUMENTS",
)

MODES = {
    "openinference": harness.Mode("on (OpenInference default: nothing hidden)"),
    "openinference-hidden": harness.Mode(
        "off: " + ", ".join(f"{k}=true" for k in HIDE), {k: "true" for k in HIDE}
    ),
}


def record(rec: harness.Recording) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "interop-openinference"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    # TraceConfig() reads the OPENINFERENCE_HIDE_* switches from the environment.
    tracer = OITracer(provider.get_tracer("interop.support_agent"), config=TraceConfig())
    client = OpenAI(base_url=rec.openai_base_url, api_key="sk-interop-fake")

    @tracer.retriever(name="retrieve")
    def retrieve(query: str) -> list[dict[str, Any]]:
        turn = scenario.turn_for_question(query)
        assert turn is not None
        docs = [{"id": d.id, "score": d.score, "content": d.text} for d in turn.documents()]
        trace.get_current_span().set_attributes(
            get_retriever_attributes(documents=docs)  # type: ignore[arg-type]
        )
        return docs

    @tracer.agent(name=scenario.AGENT_NAME)
    def support_agent(question: str) -> str:
        trace.get_current_span().set_attribute(SpanAttributes.AGENT_NAME, scenario.AGENT_NAME)
        docs = retrieve(question)
        context = "\n".join(d["content"] for d in docs)
        completion = client.chat.completions.create(
            model=scenario.MODEL,
            messages=[
                {
                    "role": "system",
                    "content": scenario.SYSTEM_PROMPT_TEMPLATE.format(context=context),
                },
                {"role": "user", "content": question},
            ],
        )
        return completion.choices[0].message.content or ""

    for turn in scenario.TURNS:
        with ExitStack() as stack:
            if turn.session_id:
                stack.enter_context(using_session(turn.session_id))
            stack.enter_context(using_user(scenario.USER_ID))
            support_agent(turn.question)
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    harness.main("openinference", MODES, record)
