"""Record the agent scenario (``agent_scenario.py``) in the OpenAI Agents SDK, traced by
OpenInference's ``OpenAIAgentsInstrumentor`` (default ``TraceConfig``: nothing hidden; registered
``exclusive_processor=True``, so only the OTel path remains).

``support-agent`` has ``lookup_order`` and ``refund`` as ``@function_tool`` s and
``handoffs=[billing-agent]`` (the SDK's hand-off tool ``transfer_to_billing_agent``);
``billing-agent`` has ``refund``. Both run on ``OpenAIChatCompletionsModel`` at the scripted
model. A tool error is the SDK's default: the tool's ``failure_error_function`` tells the model a
fixed text and the function span carries the error. Each turn is one ``Runner.run`` of the
support agent (one SDK trace), grouped by ``RunConfig(group_id=...)`` as the SDK does.
"""

from __future__ import annotations

import asyncio

import agent_harness
import agent_scenario as sc
import harness
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from agents.tracing import get_trace_provider
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODES = {
    "agent-openai-agents": harness.Mode(
        "on (OpenInference default TraceConfig: nothing hidden; the SDK's"
        " trace_include_sensitive_data default True)"
    ),
}


@function_tool
def lookup_order(order_id: str) -> str:
    """Look an order up: its item, status and total.

    Args:
        order_id: The order's id.
    """
    return sc.lookup_order(order_id)


@function_tool
def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order.

    Args:
        order_id: The order's id.
        amount: The amount to refund.
    """
    return sc.refund(order_id, amount)


def build_agents(base_url: str) -> Agent:
    client = AsyncOpenAI(base_url=base_url, api_key="sk-interop-fake")
    model = OpenAIChatCompletionsModel(model=sc.MODEL, openai_client=client)
    billing = Agent(
        name=sc.BILLING_AGENT, instructions=sc.BILLING_PROMPT, tools=[refund], model=model
    )
    return Agent(
        name=sc.SUPPORT_AGENT,
        instructions=sc.SUPPORT_PROMPT,
        tools=[lookup_order, refund],
        handoffs=[billing],
        model=model,
    )


async def run_turns(agent: Agent) -> list[str]:
    outputs = []
    for turn in sc.TURNS:
        config = RunConfig(group_id=turn.session_id, trace_metadata={"user_id": sc.USER_ID})
        result = await Runner.run(agent, turn.question, run_config=config)
        outputs.append(str(result.final_output))
    return outputs


def record(rec: agent_harness.AgentRecording) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "interop-agent-openai-agents"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    names = [type(p).__name__ for p in get_trace_provider()._multi_processor._processors]
    if names != ["OpenInferenceTracingProcessor"]:
        raise SystemExit(f"unexpected Agents SDK trace processors: {names}")
    outputs = asyncio.run(run_turns(build_agents(rec.openai_base_url)))
    provider.force_flush()
    provider.shutdown()
    rec.check_outputs(outputs)
    rec.note(
        "hand-off: Agent(handoffs=[billing-agent]); the SDK's tool transfer_to_billing_agent; the"
        " billing agent sees the whole history (RunConfig.nest_handoff_history default False)"
    )
    rec.note(
        "tool error: the SDK's default failure_error_function; the model is told 'An error"
        " occurred while running the tool. Please try again.' (the exception text is not sent)"
    )
    rec.note("session: RunConfig(group_id='agent-sess-1') on turns 1-4 (exported by no span)")


if __name__ == "__main__":
    agent_harness.main("agent-openai-agents", MODES, record)
