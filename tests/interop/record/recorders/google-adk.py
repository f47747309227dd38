"""Record the interop scenario traced by Google ADK's own OpenTelemetry instrumentation.

The agent is an ``LlmAgent`` on ADK's LiteLLM wrapper (``LiteLlm(model="openai/gpt-4o-mini",
api_base=<fake server>)``: chat completions), run by an ``InMemoryRunner``. ADK writes its spans
(``invoke_agent``, the model call, ``execute_tool``) to the global TracerProvider and its content
log records to the global LoggerProvider; both are set here with OTLP/HTTP exporters pointed at
the capture server, as ADK's docs say to do for a custom backend.

Retrieval is a function tool ``retrieve_docs(query, tool_context)`` returning
``{"documents": [{id, score, text}]}``; it also puts the texts in the invocation-scoped state
``temp:retrieved``, which the agent's instruction template reads (``{temp:retrieved?}``, ADK's
state injection), so the second model request's system instruction carries the retrieved
context, as the scenario's template asks (the first has an empty context).

Names and sessions: ADK agent names must be Python identifiers, so the agent is
``support_agent`` (not ``support-agent``). A session is ADK's own: ``create_session(user_id=
"user-7", session_id="sess-42")`` for turns 1-4; ADK always runs in a session, so turn 5 runs in
a second one with a fixed id (``adk-turn-5``) rather than none. ``include_contents="none"``
keeps each request to the current turn (the scenario's [system, user] plus the tool round trip)
although turns 1-4 share a session.

Content capture (the switches are read in ``google.adk.telemetry.context``; ADK 2.13 emits
telemetry schema version 2 by default, the OTel GenAI semconv aligned format, with no
``call_llm`` span). ADK's true default captures no content at all:
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` unset is NO_CONTENT, and the legacy
``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS`` (default on) only feeds the schema-1 spans. So:
- ``google-adk``: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``: messages on
  the ``generate_content`` spans, tool arguments and results on ``execute_tool``;
- ``google-adk-events``: ``...=EVENT_ONLY``: messages only on the
  ``gen_ai.client.inference.operation.details`` log records (one per model call, joined to its
  span by trace and span id); the spans keep none.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import harness
import scenario
from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from opentelemetry import _logs, trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
COST_MAP = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
MODES = {
    "google-adk": harness.Mode(
        content_capture=f"on, on the spans: {CAPTURE}=SPAN_ONLY",
        env={**COST_MAP, CAPTURE: "SPAN_ONLY"},
    ),
    "google-adk-events": harness.Mode(
        content_capture=f"on, as log records: {CAPTURE}=EVENT_ONLY",
        env={**COST_MAP, CAPTURE: "EVENT_ONLY"},
    ),
}
APP = "interop-shop"
AGENT = "support_agent"  # ADK agent names must be identifiers: no "support-agent"
TURN5_SESSION = "adk-turn-5"
CONTEXT_KEY = "temp:retrieved"


def retrieve_docs(query: str, tool_context: ToolContext) -> dict[str, Any]:
    """Retrieve the shop documents that answer the customer's question.

    Args:
        query: The customer's question.
    """
    found = scenario.turn_for_question(query)
    docs = found.documents() if found else []
    tool_context.state[CONTEXT_KEY] = "\n".join(d.text for d in docs)
    return {"documents": [{"id": d.id, "score": d.score, "text": d.text} for d in docs]}


def build_agent(rec: harness.Recording) -> LlmAgent:
    model = LiteLlm(
        model="openai/" + scenario.MODEL, api_base=rec.openai_base_url, api_key="sk-interop-fake"
    )
    return LlmAgent(
        name=AGENT,
        model=model,
        description="Answers the online shop's customers.",
        instruction=scenario.SYSTEM_PROMPT_TEMPLATE.format(context="{" + CONTEXT_KEY + "?}"),
        tools=[retrieve_docs],
        include_contents="none",
    )


async def run_turns(rec: harness.Recording) -> list[str]:
    runner = InMemoryRunner(agent=build_agent(rec), app_name=APP)
    sessions = runner.session_service
    await sessions.create_session(
        app_name=APP, user_id=scenario.USER_ID, session_id=scenario.SESSION_ID
    )
    await sessions.create_session(app_name=APP, user_id=scenario.USER_ID, session_id=TURN5_SESSION)
    outputs = []
    for turn in scenario.TURNS:
        message = types.Content(role="user", parts=[types.Part(text=turn.question)])
        answer = ""
        async for event in runner.run_async(
            user_id=scenario.USER_ID,
            session_id=turn.session_id or TURN5_SESSION,
            new_message=message,
        ):
            if event.is_final_response() and event.content and event.content.parts:
                answer = "".join(p.text or "" for p in event.content.parts)
        outputs.append(answer)
    await runner.close()
    return outputs


def record(rec: harness.Recording) -> None:
    resource = Resource.create({"service.name": "interop-google-adk"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url))
    )
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=rec.logs_url))
    )
    _logs.set_logger_provider(logger_provider)
    outputs = asyncio.run(run_turns(rec))
    tracer_provider.force_flush()
    logger_provider.force_flush()
    tracer_provider.shutdown()
    logger_provider.shutdown()
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected agent outputs: {json.dumps(outputs)}")
    switches = (
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS",
        "OTEL_SEMCONV_STABILITY_OPT_IN",
        "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN",
    )
    rec.note(", ".join(f"{k}={os.environ.get(k, '')!r}" for k in switches))
    rec.note("agent name 'support_agent': ADK requires an identifier, 'support-agent' is refused")
    rec.note(
        "retrieval is a function tool 'retrieve_docs': two chat completions per turn (tool call,"
        " then the answer); the tool returns {'documents': [{id, score, text}]} and puts the"
        " texts in state 'temp:retrieved', rendered into the instruction ({temp:retrieved?}):"
        " the first request's system prompt has an empty context, the second carries the texts"
    )
    rec.note(
        f"session: ADK's own, session_id='sess-42' user_id='user-7' for turns 1-4; ADK always"
        f" has a session, so turn 5 runs in session {TURN5_SESSION!r} (same user);"
        " include_contents='none' keeps history out of the requests"
    )


if __name__ == "__main__":
    harness.main("google-adk", MODES, record)
