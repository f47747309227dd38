"""Record the scenario traced by OpenLIT (``openlit.init`` + its OpenAI instrumentation).

OpenLIT has no retriever or agent-run notion for plain code, so the recorder uses its manual
tracing API, ``openlit.start_trace(name)`` (a span whose ``TracedSpan`` offers ``set_result``,
written to ``gen_ai.output.messages``, and ``set_metadata``): one for the agent turn
("support-agent") and one for the retrieve step inside it. ``openlit.agent_context`` tags the
LLM call with ``gen_ai.agent.name``; ``openlit.using_attributes`` puts the session
(``gen_ai.conversation.id``, the GenAI semconv key, OpenLIT has none of its own for plain
calls) and ``user.id`` on every auto-instrumented span of the turn. ``start_trace`` spans do not
get those custom attributes, so the recorder sets the same keys on them with ``set_metadata``.
Content capture: ``openlit.init(capture_message_content=True)`` (its default). OpenLIT also
emits OTel log events unless ``disable_events``; they are recorded as log bodies.
"""

from __future__ import annotations

import json

import harness
import openlit
import scenario
from openai import OpenAI
from opentelemetry import _logs, trace

MODES = {
    "openlit": harness.Mode(content_capture="on: openlit.init(capture_message_content=True)"),
}


def _turn_attributes(turn: scenario.Turn) -> dict[str, str]:
    attributes = {"user.id": scenario.USER_ID}
    if turn.session_id is not None:
        attributes["gen_ai.conversation.id"] = turn.session_id
    return attributes


def run_turn(client: OpenAI, turn: scenario.Turn) -> str:
    attributes = _turn_attributes(turn)
    with (
        openlit.start_trace(scenario.AGENT_NAME) as agent_span,
        openlit.agent_context(scenario.AGENT_NAME),
        openlit.using_attributes(attributes),
    ):
        # The question as input: OpenLIT's TracedSpan has set_result (output) but no input
        # setter, so the question goes in as metadata under the GenAI input key.
        agent_span.set_metadata(
            {
                **attributes,
                "gen_ai.agent.name": scenario.AGENT_NAME,
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.input.messages": turn.question,
            }
        )
        with openlit.start_trace("retrieve") as retrieve_span:
            docs = turn.documents()
            retrieve_span.set_metadata(
                {
                    **attributes,
                    "gen_ai.operation.name": "retrieval",
                    "gen_ai.retrieval.query.text": turn.question,
                }
            )
            retrieve_span.set_result(
                json.dumps([{"id": d.id, "score": d.score, "text": d.text} for d in docs])
            )
        completion = client.chat.completions.create(
            model=scenario.MODEL,
            messages=turn.messages(),  # type: ignore[arg-type]
        )
        answer = completion.choices[0].message.content or ""
        agent_span.set_result(answer)
    return answer


def record(rec: harness.Recording) -> None:
    openlit.init(
        application_name="interop-openlit",
        environment="interop",
        otlp_endpoint=rec.otlp_endpoint,
        capture_message_content=True,
        disable_metrics=True,
    )
    client = OpenAI(base_url=rec.openai_base_url, api_key="sk-interop-fake")
    outputs = [run_turn(client, turn) for turn in scenario.TURNS]
    tracer_provider = trace.get_tracer_provider()
    tracer_provider.force_flush()  # type: ignore[attr-defined]
    logger_provider = _logs.get_logger_provider()
    if hasattr(logger_provider, "force_flush"):
        logger_provider.force_flush()
    tracer_provider.shutdown()  # type: ignore[attr-defined]
    if hasattr(logger_provider, "shutdown"):
        logger_provider.shutdown()
    if outputs != [t.answer for t in scenario.TURNS]:
        raise SystemExit(f"unexpected outputs: {outputs}")
    rec.note(
        "agent turn and retrieve step are openlit.start_trace spans (SpanKind CLIENT, no"
        " operation or kind attribute of OpenLIT's own): the recorder adds gen_ai.agent.name,"
        " gen_ai.operation.name (invoke_agent / retrieval), the question as"
        " gen_ai.input.messages (plain text) with set_metadata; set_result writes the answer /"
        " the retrieved docs JSON to gen_ai.output.messages (plain text, as OpenLIT does)"
    )
    rec.note(
        "session/user via openlit.using_attributes({'gen_ai.conversation.id', 'user.id'}) on"
        " the auto-instrumented OpenAI span, and set_metadata with the same keys on the"
        " start_trace spans; openlit.agent_context tags the LLM span with gen_ai.agent.name"
    )


if __name__ == "__main__":
    harness.main("openlit", MODES, record)
