"""Record the interop scenario traced by pydantic-ai's own OpenTelemetry instrumentation.

pydantic-ai retrieves through a tool: the agent "support-agent" has a ``retrieve`` tool, the fake
server first answers with a call to it and, once the tool result is in the messages, with the
scenario answer. The system prompt is a dynamic ``instructions`` function that renders the
scenario template with whatever the tool has retrieved so far in this run, so the second model
request carries the retrieved context as the scenario asks.

Sessions: pydantic-ai has its own conversation notion, ``Agent.run(conversation_id=...)``; its
instrumentation writes it as ``gen_ai.conversation.id`` on the agent run span (and as baggage of
the same name). Without one it makes up a fresh UUID7 per run, so turn 5 carries a random id
rather than none (noted in the manifest).

Instrumentation: pydantic-ai 2.x has no ``Agent(instrument=True)`` any more; the documented way is
the ``Instrumentation`` capability holding ``InstrumentationSettings``.
Content capture: ``InstrumentationSettings(include_content=...)``; the format version is left at
the library's default (``DEFAULT_INSTRUMENTATION_VERSION``, recorded in the notes).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import harness
import scenario
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent, RunContext
from pydantic_ai._instrumentation import DEFAULT_INSTRUMENTATION_VERSION
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

MODES = {
    "pydantic-ai": harness.Mode(
        content_capture="on: InstrumentationSettings(include_content=True)"
    ),
    "pydantic-ai-nocontent": harness.Mode(
        content_capture="off: InstrumentationSettings(include_content=False)"
    ),
}


@dataclass
class Deps:
    """Per-run state: the documents the retrieve tool returned (feeds the instructions)."""

    retrieved: list[scenario.Document] = field(default_factory=list)


def build_agent(rec: harness.Recording, provider: TracerProvider) -> Agent[Deps, str]:
    include_content = rec.recording == "pydantic-ai"
    model = OpenAIChatModel(
        scenario.MODEL,
        provider=OpenAIProvider(base_url=rec.openai_base_url, api_key="sk-interop-fake"),
    )
    agent: Agent[Deps, str] = Agent(
        model,
        name=scenario.AGENT_NAME,
        deps_type=Deps,
        # pydantic-ai 2.x dropped Agent(instrument=...): instrumentation is a capability.
        capabilities=[
            Instrumentation(
                settings=InstrumentationSettings(
                    tracer_provider=provider, include_content=include_content
                )
            )
        ],
    )

    @agent.instructions
    def system_prompt(ctx: RunContext[Deps]) -> str:
        context = "\n".join(d.text for d in ctx.deps.retrieved)
        return scenario.SYSTEM_PROMPT_TEMPLATE.format(context=context)

    @agent.tool
    def retrieve(ctx: RunContext[Deps], query: str) -> list[dict[str, object]]:
        """Retrieve the shop documents that answer the query."""
        found = scenario.turn_for_question(query)
        docs = found.documents() if found else []
        ctx.deps.retrieved = docs
        return [{"id": d.id, "score": d.score, "text": d.text} for d in docs]

    return agent


async def run_turns(agent: Agent[Deps, str]) -> list[str]:
    outputs = []
    for turn in scenario.TURNS:
        # No message_history: each turn is its own trace with [system, user] as the scenario
        # asks; the conversation id alone ties turns 1-4 together.
        result = await agent.run(
            turn.question,
            deps=Deps(),
            conversation_id=turn.session_id,
            metadata={"user_id": scenario.USER_ID},
        )
        outputs.append(result.output)
    return outputs


def record(rec: harness.Recording) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "interop-pydantic-ai"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    agent = build_agent(rec, provider)
    outputs = asyncio.run(run_turns(agent))
    provider.force_flush()
    provider.shutdown()
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected agent outputs: {json.dumps(outputs)}")
    rec.note(
        f"instrumentation format version {DEFAULT_INSTRUMENTATION_VERSION} (the library default;"
        " versions 2-6 exist, 2-4 deprecated, 6 opt-in: tool results in role='tool')"
    )
    rec.note(
        "retrieval is a tool: two chat completions per turn (tool call to 'retrieve', then the"
        " answer); the retrieved docs are the tool result (JSON list of id/score/text) on the"
        " 'execute_tool retrieve' span and in the second request's messages"
    )
    rec.note(
        "system prompt is a dynamic instructions function: the first request's instructions have"
        " an empty context, the second request's carry the retrieved text"
        " (gen_ai.system_instructions)"
    )
    rec.note(
        "session: Agent.run(conversation_id='sess-42') -> gen_ai.conversation.id on the agent run"
        " span; turn 5 has no conversation_id, pydantic-ai then generates a random UUID7 one"
    )
    rec.note(
        "instrument=True no longer exists on Agent in pydantic-ai 2.x: instrumented via"
        " capabilities=[Instrumentation(settings=InstrumentationSettings(...))]"
    )
    rec.note(
        "user id passed as run metadata={'user_id': 'user-7'} (pydantic-ai has no user notion)"
    )


if __name__ == "__main__":
    harness.main("pydantic-ai", MODES, record)
