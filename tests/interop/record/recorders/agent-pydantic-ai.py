"""Record the agent scenario (``agent_scenario.py``) in pydantic-ai, traced by its own
instrumentation (the ``Instrumentation`` capability, ``include_content=True`` or ``False``).

``support-agent`` has the tools ``lookup_order`` and ``refund``; ``billing-agent`` has
``refund``. pydantic-ai has no hand-off primitive: its documented way is an output function, so
the support agent's ``output_type`` is ``[str, ToolOutput(transfer_to_billing_agent, name=...)]``
(named, or the output tool would be ``final_result``): the model calls it with no arguments, and
it runs the billing agent on the same question and returns its answer as the run's output. A
refund over the order total raises pydantic-ai's ``ToolFailed`` (a failed tool result the model
sees; a plain exception would end the run). Each turn is one ``agent.run`` (no history),
``conversation_id`` on turns 1-4.
"""

from __future__ import annotations

import asyncio

import agent_harness
import agent_scenario as sc
import harness
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent, RunContext, ToolOutput
from pydantic_ai._instrumentation import DEFAULT_INSTRUMENTATION_VERSION
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

MODES = {
    "agent-pydantic-ai": harness.Mode("on: InstrumentationSettings(include_content=True)"),
    "agent-pydantic-ai-nocontent": harness.Mode(
        "off: InstrumentationSettings(include_content=False)"
    ),
}


def lookup_order(order_id: str) -> str:
    """Look an order up: its item, status and total.

    Args:
        order_id: The order's id.
    """
    return sc.lookup_order(order_id)


def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order.

    Args:
        order_id: The order's id.
        amount: The amount to refund.
    """
    try:
        return sc.refund(order_id, amount)
    except sc.ToolError as exc:
        raise ToolFailed(str(exc)) from exc


def build_agents(rec: agent_harness.AgentRecording, provider: TracerProvider) -> Agent[None, str]:
    model = OpenAIChatModel(
        sc.MODEL, provider=OpenAIProvider(base_url=rec.openai_base_url, api_key="sk-interop-fake")
    )
    settings = InstrumentationSettings(
        tracer_provider=provider, include_content=rec.recording == "agent-pydantic-ai"
    )
    billing: Agent[None, str] = Agent(
        model,
        name=sc.BILLING_AGENT,
        instructions=sc.BILLING_PROMPT,
        tools=[refund],
        capabilities=[Instrumentation(settings=settings)],
    )

    async def transfer_to_billing_agent(ctx: RunContext[None]) -> str:
        """Hand the conversation to the billing agent, which answers the customer."""
        result = await billing.run(ctx.prompt, usage=ctx.usage)
        return result.output

    return Agent(
        model,
        name=sc.SUPPORT_AGENT,
        instructions=sc.SUPPORT_PROMPT,
        tools=[lookup_order, refund],
        output_type=[str, ToolOutput(transfer_to_billing_agent, name=sc.HANDOFF_TOOL)],
        capabilities=[Instrumentation(settings=settings)],
    )


async def run_turns(agent: Agent[None, str]) -> list[str]:
    outputs = []
    for turn in sc.TURNS:
        result = await agent.run(
            turn.question, conversation_id=turn.session_id, metadata={"user_id": sc.USER_ID}
        )
        outputs.append(result.output)
    return outputs


def record(rec: agent_harness.AgentRecording) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "interop-agent-pydantic-ai"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    outputs = asyncio.run(run_turns(build_agents(rec, provider)))
    provider.force_flush()
    provider.shutdown()
    rec.check_outputs(outputs)
    rec.note(f"instrumentation format version {DEFAULT_INSTRUMENTATION_VERSION} (the default)")
    rec.note(
        "hand-off: an output function transfer_to_billing_agent (output_type=[str, fn], the"
        " documented hand-off) runs billing-agent.run(ctx.prompt) and returns its output"
    )
    rec.note("tool error: refund raises pydantic_ai.exceptions.ToolFailed(message)")
    rec.note(
        "session: Agent.run(conversation_id='agent-sess-1') on turns 1-4; turn 5 gets a random"
        " UUID7 conversation id from pydantic-ai"
    )


if __name__ == "__main__":
    agent_harness.main("agent-pydantic-ai", MODES, record)
