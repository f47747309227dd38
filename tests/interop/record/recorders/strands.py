"""Record the interop scenario traced by Strands Agents' own OpenTelemetry instrumentation.

The agent "support-agent" runs on Strands' ``OpenAIModel`` (chat completions, streamed) at the
fake server. Telemetry is the documented setup: ``StrandsTelemetry()`` creates the SDK
TracerProvider, makes it global (Strands' tracer reads the global provider when an Agent is
built) and ``setup_otlp_exporter(endpoint=...)`` adds a batching OTLP/HTTP exporter.

Retrieval:
- ``strands`` / ``strands-latest``: a ``@tool`` named ``retrieve_docs`` returning the turn's
  documents as a list of ``{id, score, text}`` (Strands serialises it to JSON text);
- ``strands-memory``: Strands' own memory module (``strands.memory.MemoryManager``, SDK 1.62):
  ``Agent(memory_manager=...)`` gives the agent the manager's ``search_memory`` tool, whose
  call opens a ``memory.search`` span with ``memory.query`` / ``memory.results`` events. The
  store follows the SDK's documented custom ``MemoryStore`` pattern (a ``search`` coroutine):
  the vended ``FileMemoryStore`` ranks by keywords and would miss the scenario's documents on
  turn 3 (off-topic), and every memory tool of ``strands-agents-tools`` 0.8.10 needs a service:
  ``retrieve`` / ``memory`` (Bedrock knowledge bases), ``agent_core_memory``,
  ``elasticsearch_memory``, ``mongodb_memory``, and ``mem0_memory`` (its local FAISS backend
  still embeds through Bedrock, OpenAI or a Hugging Face model). Memory injection is off, so
  the memory is searched once per turn, through the tool, as in the other modes.

Sessions: Strands' documented way is ``Agent(trace_attributes={"session.id": ..., "user.id":
...})``, copied onto the agent span (and the spans under it). Turns 1-4 carry both, turn 5 only
``user.id``. Each turn is a fresh Agent (no message history), so each request is [system, user]
as the scenario asks. The system prompt is the agent's own, static: Strands has no per-call
instructions hook, and the documents reach the model as the tool result.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import harness
import scenario
from strands import Agent, tool
from strands.memory import MemoryEntry, MemoryManager, SearchOptions
from strands.models.openai import OpenAIModel
from strands.telemetry import StrandsTelemetry

LATEST = "gen_ai_latest_experimental"
MODES = {
    "strands": harness.Mode(content_capture="on (Strands default: content in span events)"),
    "strands-latest": harness.Mode(
        content_capture=f"on: OTEL_SEMCONV_STABILITY_OPT_IN={LATEST}",
        env={"OTEL_SEMCONV_STABILITY_OPT_IN": LATEST},
    ),
    "strands-memory": harness.Mode(
        content_capture="on (Strands default); retrieval via MemoryManager's search_memory tool"
    ),
}
SYSTEM_PROMPT = (
    "You are the support assistant of an online shop. Answer only from the documents your"
    " retrieval tool returns."
)


@tool
def retrieve_docs(query: str) -> list[dict[str, Any]]:
    """Retrieve the shop documents that answer the query.

    Args:
        query: The customer's question.
    """
    found = scenario.turn_for_question(query)
    return [
        {"id": d.id, "score": d.score, "text": d.text} for d in (found.documents() if found else [])
    ]


class ShopDocuments:
    """A read-only Strands ``MemoryStore`` over the scenario's documents."""

    name = "shop_docs"
    description = "The online shop's policies: returns, shipping and payments."
    max_search_results: int | None = None
    writable = False
    extraction = None

    async def search(self, query: str, options: SearchOptions | None = None) -> list[MemoryEntry]:
        found = scenario.turn_for_question(query)
        return [
            MemoryEntry(content=d.text, metadata={"id": d.id, "score": d.score})
            for d in (found.documents() if found else [])
        ]

    async def initialize(self) -> None:
        return None

    def get_tools(self) -> list[Any]:
        return []


def build_agent(rec: harness.Recording, turn: scenario.Turn) -> Agent:
    model = OpenAIModel(
        client_args={"base_url": rec.openai_base_url, "api_key": "sk-interop-fake"},
        model_id=scenario.MODEL,
    )
    attributes: dict[str, str] = {"user.id": scenario.USER_ID}
    if turn.session_id:
        attributes["session.id"] = turn.session_id
    if rec.recording == "strands-memory":
        memory = MemoryManager(stores=[ShopDocuments()], injection=False)
        return Agent(
            model=model,
            name=scenario.AGENT_NAME,
            system_prompt=SYSTEM_PROMPT,
            memory_manager=memory,
            trace_attributes=attributes,
            callback_handler=None,
        )
    return Agent(
        model=model,
        name=scenario.AGENT_NAME,
        system_prompt=SYSTEM_PROMPT,
        tools=[retrieve_docs],
        trace_attributes=attributes,
        callback_handler=None,
    )


async def run_turns(rec: harness.Recording) -> list[str]:
    outputs = []
    for turn in scenario.TURNS:
        result = await build_agent(rec, turn).invoke_async(turn.question)
        outputs.append(str(result).strip())
    return outputs


def record(rec: harness.Recording) -> None:
    telemetry = StrandsTelemetry()
    telemetry.setup_otlp_exporter(endpoint=rec.traces_url)
    outputs = asyncio.run(run_turns(rec))
    telemetry.tracer_provider.force_flush()
    telemetry.tracer_provider.shutdown()
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected agent outputs: {json.dumps(outputs)}")
    rec.note(
        f"OTEL_SEMCONV_STABILITY_OPT_IN={os.environ.get('OTEL_SEMCONV_STABILITY_OPT_IN', '')!r}"
    )
    tool_name = "search_memory" if rec.recording == "strands-memory" else "retrieve_docs"
    rec.note(
        f"retrieval is a tool ({tool_name!r}): two chat completions per turn (the tool call, then"
        " the answer); the documents are the tool result (JSON text)"
    )
    if rec.recording == "strands-memory":
        rec.note(
            "memory: strands.memory.MemoryManager(stores=[custom MemoryStore], injection=False);"
            " its search_memory tool opens a 'memory.search' span (events memory.query /"
            " memory.results) under the execute_tool span; the store is the SDK's custom-store"
            " pattern because the vended FileMemoryStore ranks by keywords (misses turn 3's"
            " documents) and the strands-agents-tools memory tools all need a service"
            " (Bedrock, AgentCore, Elasticsearch, MongoDB, mem0 with an embedder)"
        )
    rec.note(
        "session: Agent(trace_attributes={'session.id': 'sess-42', 'user.id': 'user-7'}) for"
        " turns 1-4, {'user.id': 'user-7'} for turn 5; a fresh Agent per turn (no history)"
    )
    rec.note("system prompt: the agent's own static prompt (the context comes as the tool result)")


if __name__ == "__main__":
    harness.main("strands", MODES, record)
