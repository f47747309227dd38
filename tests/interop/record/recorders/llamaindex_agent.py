"""The scenario as a LlamaIndex workflow agent, shared by the LlamaIndex recorders (one per tracer).

The usual LlamaIndex 0.14 agent shape::

    FunctionAgent(
        name="support-agent",
        tools=[RetrieverTool("retrieve_docs", ScenarioRetriever())],
        llm=OpenAILike(gpt-4o-mini at the fake server, chat completions, function calling),
        system_prompt=<the framework's own kind of prompt: an instruction, no context>,
    )

``ScenarioRetriever`` is a ``BaseRetriever`` returning the turn's documents as ``NodeWithScore``
(node id = scenario doc id, score 0.9); a vector index over the three documents with a mock
embedding would rank them all alike, so it would not return the turn's documents. The agent
retrieves through the tool: the fake server first answers with a call to ``retrieve_docs``, then,
with the tool result (the documents' texts) in the messages, with the scripted answer. Each
``agent.run`` starts a fresh context and memory, so each turn is [system, user] and one trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager

import scenario
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.tools import RetrieverTool, ToolMetadata
from llama_index.llms.openai_like import OpenAILike

TOOL_NAME = "retrieve_docs"
SYSTEM_PROMPT = (
    "You are the support assistant of an online shop. Look up the shop's documents with"
    f" {TOOL_NAME} and answer only from what it returns."
)


class ScenarioRetriever(BaseRetriever):
    """The documents of the turn whose question the query holds (score 0.9)."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        turn = scenario.turn_for_question(query_bundle.query_str)
        docs = turn.documents() if turn else []
        return [NodeWithScore(node=TextNode(id_=d.id, text=d.text), score=d.score) for d in docs]


class RetrieveArgs(BaseModel):
    """What the model passes to the retrieve tool."""

    query: str = Field(description="The customer's question")


def build_agent(openai_base_url: str) -> FunctionAgent:
    """The agent turn: question in, answer out (after one call to the retrieve tool)."""
    llm = OpenAILike(
        model=scenario.MODEL,
        api_base=openai_base_url,
        api_key="sk-interop-fake",
        is_chat_model=True,
        is_function_calling_model=True,
        temperature=0.0,
    )
    tool = RetrieverTool(
        retriever=ScenarioRetriever(),
        metadata=ToolMetadata(
            name=TOOL_NAME,
            description="Retrieve the shop documents (returns, shipping, payments) that answer"
            " the customer's question.",
            fn_schema=RetrieveArgs,
        ),
    )
    return FunctionAgent(
        name=scenario.AGENT_NAME,
        description="Answers customer questions from the shop's documents.",
        tools=[tool],
        llm=llm,
        system_prompt=SYSTEM_PROMPT,
    )


def run_turns(
    agent: FunctionAgent, around: Callable[[scenario.Turn], AbstractContextManager[object]]
) -> list[str]:
    """Each scenario turn as one ``agent.run`` inside ``around(turn)`` (session/user context)."""

    async def run_all() -> list[str]:
        outputs = []
        for turn in scenario.TURNS:
            with around(turn):
                result = await agent.run(user_msg=turn.question)
            outputs.append(str(result.response.content or ""))
        return outputs

    return asyncio.run(run_all())


def check_outputs(outputs: list[str]) -> None:
    """Stop the recording if the agent did not return the scripted answers."""
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected agent outputs: {outputs}")
