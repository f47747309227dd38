"""Record the agent scenario (``agent_scenario.py``) in LangGraph, traced by OpenInference's
LangChain instrumentor (default ``TraceConfig``: nothing hidden).

Each agent is a prebuilt ``create_react_agent`` on ``ChatOpenAI`` at the scripted model, named
``support-agent`` / ``billing-agent`` (OpenInference marks a run whose name contains "agent" as
an AGENT span). They are the two nodes of a ``StateGraph(MessagesState)``; the hand-off is
LangGraph's documented hand-off tool: ``transfer_to_billing_agent`` returns
``Command(goto="billing-agent", graph=Command.PARENT)`` with the tool message added to the
shared messages, so the billing agent sees the whole history. Tools run in a
``ToolNode(handle_tool_errors=True)``: the refund error becomes an error ``ToolMessage`` the model
sees (the prebuilt default re-raises anything but invocation errors). Each turn is one
``graph.invoke`` (no history) under ``using_attributes(session_id=..., user_id=...)``.
"""

from __future__ import annotations

from typing import Annotated, Any

import agent_harness
import agent_scenario as sc
import harness
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode, create_react_agent
from langgraph.types import Command
from openinference.instrumentation import using_attributes, using_user
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODES = {
    "agent-langgraph": harness.Mode(
        "on: OpenInference TraceConfig defaults (no OPENINFERENCE_HIDE_* set)"
    ),
}


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


@tool(sc.HANDOFF_TOOL)
def transfer_to_billing_agent(
    state: Annotated[MessagesState, InjectedState],
    tool_call_id: Annotated[str, InjectedToolCallId],
) -> Command[Any]:
    """Hand the conversation to the billing agent (double charges, refunds of charges)."""
    message = ToolMessage(
        content=f"Transferred to {sc.BILLING_AGENT}",
        name=sc.HANDOFF_TOOL,
        tool_call_id=tool_call_id,
    )
    return Command(
        goto=sc.BILLING_AGENT,
        update={"messages": [*state["messages"], message]},
        graph=Command.PARENT,
    )


def build_graph(base_url: str) -> Any:
    model = ChatOpenAI(model=sc.MODEL, base_url=base_url, api_key="sk-interop-fake")
    support = create_react_agent(
        model,
        ToolNode([lookup_order, refund, transfer_to_billing_agent], handle_tool_errors=True),
        prompt=sc.SUPPORT_PROMPT,
        name=sc.SUPPORT_AGENT,
    )
    billing = create_react_agent(
        model,
        ToolNode([refund], handle_tool_errors=True),
        prompt=sc.BILLING_PROMPT,
        name=sc.BILLING_AGENT,
    )
    graph = StateGraph(MessagesState)
    graph.add_node(sc.SUPPORT_AGENT, support, destinations=(sc.BILLING_AGENT,))
    graph.add_node(sc.BILLING_AGENT, billing)
    graph.add_edge(START, sc.SUPPORT_AGENT)
    return graph.compile()


def record(rec: agent_harness.AgentRecording) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "interop-agent-langgraph"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    graph = build_graph(rec.openai_base_url)
    outputs = []
    for turn in sc.TURNS:
        question = {"messages": [{"role": "user", "content": turn.question}]}
        if turn.session_id is not None:
            with using_attributes(session_id=turn.session_id, user_id=sc.USER_ID):
                state = graph.invoke(question)
        else:
            with using_user(sc.USER_ID):
                state = graph.invoke(question)
        outputs.append(str(state["messages"][-1].content))
    LangChainInstrumentor().uninstrument()
    provider.force_flush()
    provider.shutdown()
    rec.check_outputs(outputs)
    rec.note(
        "agents: langgraph.prebuilt.create_react_agent(name='support-agent'/'billing-agent') as"
        " nodes of a StateGraph(MessagesState); hand-off tool transfer_to_billing_agent returns"
        " Command(goto='billing-agent', graph=Command.PARENT)"
    )
    rec.note(
        "tool error: ToolNode(handle_tool_errors=True) sends the model an error ToolMessage"
        " (status='error')"
    )
    rec.note("session/user via openinference.instrumentation.using_attributes")
    rec.note(
        "create_react_agent warns LangGraphDeprecatedSinceV10 (moved to langchain.agents."
        "create_agent); the brief asks for it, and it is what LangGraph 1.x still ships"
    )


if __name__ == "__main__":
    agent_harness.main("agent-langgraph", MODES, record)
