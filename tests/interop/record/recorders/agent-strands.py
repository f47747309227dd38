"""Record the agent scenario (``agent_scenario.py``) in Strands Agents, traced by its own
OpenTelemetry (``StrandsTelemetry`` + OTLP/HTTP exporter, the documented setup).

``support-agent`` (tools ``lookup_order``, ``refund``) and ``billing-agent`` (tool ``refund``) run
on Strands' ``OpenAIModel`` (chat completions, streamed) at the scripted model, as the two nodes
of a ``strands.multiagent.Swarm`` whose entry point is the support agent: Strands' hand-off is the
swarm's own ``handoff_to_agent(agent_name, message)`` tool, so the scripted hand-off call is that
(``HANDOFF`` below) instead of ``transfer_to_billing_agent()``. The swarm gives each agent the
task as "Context: ... User Request: <question>". A tool error is a Python exception in the
``@tool``: Strands turns it into an error tool result the model sees. Each turn is a fresh swarm
(no history) with ``trace_attributes`` ``session.id`` (turns 1-4) and ``user.id``.
"""

from __future__ import annotations

import asyncio
import os

import agent_harness
import agent_scenario as sc
import harness
from strands import Agent, tool
from strands.models.openai import OpenAIModel
from strands.multiagent import Swarm
from strands.telemetry import StrandsTelemetry

LATEST = "gen_ai_latest_experimental"
MODES = {
    "agent-strands": harness.Mode("on (Strands default: content in span events)"),
    "agent-strands-latest": harness.Mode(
        f"on: OTEL_SEMCONV_STABILITY_OPT_IN={LATEST}",
        env={"OTEL_SEMCONV_STABILITY_OPT_IN": LATEST},
    ),
}
# the support agent's model is called once more after handoff_to_agent's result (closing)
HANDOFF = sc.HandOffShape(
    sc.ToolCall(
        "handoff_to_agent",
        {
            "agent_name": sc.BILLING_AGENT,
            "message": "The customer was charged twice for order A-1002 and needs a refund.",
        },
    ),
    closing=True,
)


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up: its item, status and total.

    Args:
        order_id: The order's id.
    """
    return sc.lookup_order(order_id)


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order.

    Args:
        order_id: The order's id.
        amount: The amount to refund.
    """
    return sc.refund(order_id, amount)


def build_swarm(rec: agent_harness.AgentRecording, turn: sc.Turn) -> Swarm:
    attributes: dict[str, str] = {"user.id": sc.USER_ID}
    if turn.session_id:
        attributes["session.id"] = turn.session_id

    def agent(name: str, prompt: str, tools: list[object]) -> Agent:
        model = OpenAIModel(
            client_args={"base_url": rec.openai_base_url, "api_key": "sk-interop-fake"},
            model_id=sc.MODEL,
        )
        return Agent(
            model=model,
            name=name,
            system_prompt=prompt,
            tools=tools,
            trace_attributes=attributes,
            callback_handler=None,
        )

    support = agent(sc.SUPPORT_AGENT, sc.SUPPORT_PROMPT, [lookup_order, refund])
    billing = agent(sc.BILLING_AGENT, sc.BILLING_PROMPT, [refund])
    return Swarm([support, billing], entry_point=support, trace_attributes=attributes)


async def run_turns(rec: agent_harness.AgentRecording) -> list[str]:
    outputs = []
    for turn in sc.TURNS:
        result = await build_swarm(rec, turn).invoke_async(turn.question)
        last = result.node_history[-1].node_id
        outputs.append(str(result.results[last].result).strip())
    return outputs


def record(rec: agent_harness.AgentRecording) -> None:
    telemetry = StrandsTelemetry()
    telemetry.setup_otlp_exporter(endpoint=rec.traces_url)
    outputs = asyncio.run(run_turns(rec))
    telemetry.tracer_provider.force_flush()
    telemetry.tracer_provider.shutdown()
    rec.check_outputs(outputs)
    opt_in = os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "")
    rec.note(f"OTEL_SEMCONV_STABILITY_OPT_IN={opt_in!r}")
    rec.note(
        "hand-off: Swarm([support-agent, billing-agent], entry_point=support-agent); the model"
        " calls the swarm's handoff_to_agent(agent_name='billing-agent', message=...)"
    )
    rec.note(
        "the swarm sends each agent 'Context:\\n... User Request: <question>' as its user"
        " message, not the bare question"
    )
    rec.note("tool error: refund raises; Strands sends the model an error tool result")


if __name__ == "__main__":
    agent_harness.main("agent-strands", MODES, record, HANDOFF)
