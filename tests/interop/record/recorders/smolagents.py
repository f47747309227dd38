"""Record the interop scenario run by a smolagents ``ToolCallingAgent``, traced by OpenInference.

The agent has one tool, ``retrieve_docs`` (returns the turn's document texts), and smolagents'
own ``final_answer`` tool; its model is ``OpenAIServerModel`` pointed at the fake server (chat
completions). ``SmolagentsInstrumentor`` traces the run (AGENT), each step (CHAIN), each
``Model.generate`` (LLM) and each tool call (TOOL); session and user come from OpenInference's
``using_session`` / ``using_user`` around ``agent.run``.

smolagents and the harness's fake server do not fit as they are, so this recorder serves a
subclass of ``harness.FakeOpenAI`` (the harness itself is unchanged):

- a ToolCallingAgent finishes only through a ``final_answer`` tool call; a plain text answer is
  parsed as a JSON tool call, fails, and the agent retries until ``max_steps``;
- smolagents sends a tool result as a ``user`` message (``Observation:`` ...), never as a
  ``role="tool"`` message, and its task message is ``New task:\\n<question>``: the stock reply
  would ask for the retrieve tool again on every call.

So the second call of each turn answers with ``final_answer(answer=<scenario answer>)``.
Run by ``record.sh smolagents``.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

import harness
import scenario
from openinference.instrumentation import using_session, using_user
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from smolagents import OpenAIServerModel, ToolCallingAgent, tool

MODES = {"smolagents": harness.Mode("on (OpenInference default: nothing hidden)")}
# smolagents names must be Python identifiers: "support-agent" raises ValueError.
AGENT_NAME = scenario.AGENT_NAME.replace("-", "_")


class FinalAnswerFake(harness.FakeOpenAI):
    """The scripted server, answering a smolagents turn: retrieve_docs, then final_answer."""

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        completion = super().reply(request)
        users = [
            harness._text_of(m.get("content"))
            for m in request.get("messages", [])
            if m.get("role") == "user"
        ]
        turn = next((t for t in map(scenario.turn_for_question, users) if t is not None), None)
        if turn is None or not request.get("tools"):
            return completion
        observed = any(text.startswith("Observation:") for text in users)
        name, arguments = (
            ("final_answer", {"answer": turn.answer})
            if observed
            else ("retrieve_docs", {"query": turn.question})
        )
        suffix = "final" if observed else "tool"
        completion["id"] = f"chatcmpl-{turn.number}-{suffix}"
        completion["choices"][0]["finish_reason"] = "tool_calls"
        completion["choices"][0]["message"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn.number}_{suffix}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
        return completion


@tool
def retrieve_docs(query: str) -> list[str]:
    """Retrieve the shop documents that answer the query.

    Args:
        query: the customer's question.
    """
    found = scenario.turn_for_question(query)
    return [d.text for d in found.documents()] if found else []


def run_turns(rec: harness.Recording, provider: TracerProvider) -> list[str]:
    SmolagentsInstrumentor().instrument(tracer_provider=provider)
    model = OpenAIServerModel(
        model_id=scenario.MODEL, api_base=rec.openai_base_url, api_key="sk-interop-fake"
    )
    agent = ToolCallingAgent(
        tools=[retrieve_docs], model=model, name=AGENT_NAME, max_steps=3, verbosity_level=0
    )
    outputs = []
    for turn in scenario.TURNS:
        with ExitStack() as stack:
            if turn.session_id:
                stack.enter_context(using_session(turn.session_id))
            stack.enter_context(using_user(scenario.USER_ID))
            outputs.append(str(agent.run(turn.question)))
    return outputs


def record(rec: harness.Recording) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "interop-smolagents"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    outputs = run_turns(rec, provider)
    provider.force_flush()
    provider.shutdown()
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected agent outputs: {json.dumps(outputs)}")
    rec.note(
        "fake server wrapped in the recorder (FinalAnswerFake): a ToolCallingAgent ends only"
        " through a final_answer tool call (plain text is parsed as a JSON tool call and fails),"
        " and smolagents sends tool results as user messages ('Observation:'), so call 1 of a"
        " turn answers retrieve_docs(query=<question>), call 2 final_answer(answer=<answer>)"
    )
    rec.note(
        f"agent named {AGENT_NAME!r}: smolagents requires a Python identifier"
        f" ({scenario.AGENT_NAME!r} raises ValueError)"
    )
    rec.note(
        "system prompt is smolagents' own toolcalling_agent.yaml prompt (tool descriptions),"
        " not the scenario template; the user message is 'New task:\\n<question>'; the"
        " retrieved texts reach the model as a user message 'Observation:\\n[...]' (Python repr"
        " of the tool's list)"
    )
    rec.note(
        "session and user: openinference using_session('sess-42') / using_user('user-7') around"
        " agent.run (session.id and user.id on every span); turn 5 has using_user only"
    )


if __name__ == "__main__":
    # harness._servers builds its server from the module's FakeOpenAI at call time: swapping
    # the name serves the subclass in this process (and in the child main starts, which runs
    # this file again) without a change to harness.py.
    harness.FakeOpenAI = FinalAnswerFake  # type: ignore[misc]
    harness.main("smolagents", MODES, record)
