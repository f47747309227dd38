"""The scenario's support agent in the OpenAI Agents SDK, shared by the two openai-agents recorders.

One ``Agent`` named ``scenario.AGENT_NAME`` with one ``@function_tool`` ``retrieve_docs`` that
returns the turn's document texts (a ``list[str]``), on ``OpenAIChatCompletionsModel`` pointed at
the fake server (the SDK's chat-completions model class; its default is the Responses API). The
instructions are a dynamic function that renders ``scenario.SYSTEM_PROMPT_TEMPLATE`` with the
documents retrieved so far in the run (kept in the run context), so the model call that answers
carries the retrieved context in its system prompt, as in the pydantic-ai recording.

Each turn is one ``Runner.run`` (one SDK trace, default workflow name "Agent workflow"). Turns
1-4 are grouped the SDK's usual way, ``RunConfig(group_id=scenario.SESSION_ID)``; the user goes in
``RunConfig(trace_metadata={"user_id": ...})`` on every turn; turn 5 has no group.

The SDK's own trace processors (the default uploads to OpenAI's tracing backend) are the
recorder's business: call :func:`run_turns` after the instrumentation is registered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import scenario
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI


@dataclass
class Deps:
    """Per-run state: the document texts the tool returned (feeds the instructions)."""

    retrieved: list[str] = field(default_factory=list)


def instructions(ctx: RunContextWrapper[Deps], agent: Agent[Deps]) -> str:
    return scenario.SYSTEM_PROMPT_TEMPLATE.format(context="\n".join(ctx.context.retrieved))


@function_tool
def retrieve_docs(ctx: RunContextWrapper[Deps], query: str) -> list[str]:
    """Retrieve the texts of the shop documents that answer the query."""
    found = scenario.turn_for_question(query)
    texts = [d.text for d in found.documents()] if found else []
    ctx.context.retrieved = texts
    return texts


def build_agent(openai_base_url: str) -> Agent[Deps]:
    client = AsyncOpenAI(base_url=openai_base_url, api_key="sk-interop-fake")
    return Agent[Deps](
        name=scenario.AGENT_NAME,
        instructions=instructions,
        tools=[retrieve_docs],
        model=OpenAIChatCompletionsModel(model=scenario.MODEL, openai_client=client),
    )


async def _run(agent: Agent[Deps]) -> list[str]:
    outputs = []
    for turn in scenario.TURNS:
        config = RunConfig(group_id=turn.session_id, trace_metadata={"user_id": scenario.USER_ID})
        result = await Runner.run(agent, turn.question, context=Deps(), run_config=config)
        outputs.append(str(result.final_output))
    return outputs


def run_turns(openai_base_url: str) -> None:
    """Run the five turns; raises if an answer is not the scenario's."""
    outputs = asyncio.run(_run(build_agent(openai_base_url)))
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected agent outputs: {outputs}")


NOTES = (
    "Agent(name='support-agent', tools=[retrieve_docs], model=OpenAIChatCompletionsModel(...)):"
    " two chat completions per turn (a tool call to 'retrieve_docs', then the answer)",
    "retrieve_docs returns list[str] (the document texts); the SDK sends the model str(list), a"
    " Python repr, as the tool message content; the function span's output is the list itself",
    "instructions is a dynamic function: the first request's system prompt has an empty context,"
    " the second carries the retrieved text (scenario.SYSTEM_PROMPT_TEMPLATE)",
    "session: RunConfig(group_id='sess-42') on turns 1-4, none on turn 5; user:"
    " RunConfig(trace_metadata={'user_id': 'user-7'}) on every turn",
    "openai-agents 0.24 adds task and turn spans by default (RunConfig.tracing"
    " include_task_and_turn_spans); left on",
)
