"""Record the scenario traced by the Langfuse Python SDK v3 (OpenTelemetry-based), exported over
OTLP to the capture server as to a Langfuse host (``{base_url}/api/public/otel/v1/traces``).

Observations by ``@observe(as_type=...)``: the agent turn (``agent``), the retrieval
(``retriever``, returning the documents) and, in ``langfuse``, the model call as a
``generation`` the app fills itself (``update_current_generation(model=, input=, output=,
usage_details=)``). In ``langfuse-openai`` the model call is Langfuse's OpenAI integration
(``from langfuse.openai import OpenAI``) instead, inside the same agent and retriever
observations. The session and user: ``update_current_trace(session_id=..., user_id=...)``.
"""

from __future__ import annotations

import os

import harness
import scenario

MODES = {
    "langfuse": harness.Mode(content_capture="on (Langfuse default: inputs and outputs captured)"),
    "langfuse-openai": harness.Mode(
        content_capture="on (Langfuse default), model call by langfuse.openai",
        env={"INTEROP_LANGFUSE_OPENAI": "1"},
    ),
}


def record(rec: harness.Recording) -> None:
    os.environ["LANGFUSE_BASE_URL"] = rec.otlp_endpoint
    os.environ["LANGFUSE_PUBLIC_KEY"] = "pk-lf-interop"
    os.environ["LANGFUSE_SECRET_KEY"] = "sk-lf-interop"
    os.environ["LANGFUSE_TRACING_ENVIRONMENT"] = "interop"
    from langfuse import get_client, observe

    integration = os.environ.get("INTEROP_LANGFUSE_OPENAI") == "1"
    if integration:
        from langfuse.openai import OpenAI
    else:
        from openai import OpenAI  # type: ignore[assignment]
    langfuse = get_client()
    client = OpenAI(base_url=rec.openai_base_url, api_key="sk-interop-fake")

    @observe(name="retrieve", as_type="retriever")
    def retrieve(query: str) -> list[dict[str, object]]:
        turn = scenario.turn_for_question(query)
        assert turn is not None
        return [{"id": d.id, "score": d.score, "text": d.text} for d in turn.documents()]

    def call_model(turn: scenario.Turn) -> str:
        completion = client.chat.completions.create(
            model=scenario.MODEL,
            messages=turn.messages(),  # type: ignore[arg-type]
        )
        return completion.choices[0].message.content or ""

    @observe(name="chat", as_type="generation")
    def generation(turn: scenario.Turn) -> str:
        answer = call_model(turn)
        langfuse.update_current_generation(
            model=scenario.MODEL, input=turn.messages(), output=answer
        )
        return answer

    @observe(name=scenario.AGENT_NAME, as_type="agent")
    def support_agent(question: str) -> str:
        turn = scenario.turn_for_question(question)
        assert turn is not None
        langfuse.update_current_trace(session_id=turn.session_id, user_id=scenario.USER_ID)
        docs = retrieve(question)
        assert "\n".join(str(d["text"]) for d in docs) == turn.context
        return call_model(turn) if integration else generation(turn)

    outputs = [support_agent(turn.question) for turn in scenario.TURNS]
    langfuse.flush()
    langfuse.shutdown()
    if outputs != [t.answer for t in scenario.TURNS]:
        raise SystemExit(f"unexpected outputs: {outputs}")
    rec.note(
        "agent turn and retrieval are @observe(as_type='agent' / 'retriever') observations;"
        + (
            " the model call is langfuse.openai's OpenAI integration"
            if integration
            else " the model call a @observe(as_type='generation') the app fills with"
            " update_current_generation(model, input=messages, output=answer)"
        )
    )
    rec.note("session and user via langfuse.update_current_trace(session_id=, user_id=)")


if __name__ == "__main__":
    harness.main("langfuse", MODES, record)
