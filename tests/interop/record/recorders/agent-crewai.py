"""Record the agent scenario (``agent_scenario.py``) in CrewAI, traced by OpenInference's
``CrewAIInstrumentor`` (crew, task, agent and tool spans) with its ``OpenAIInstrumentor`` for
the model calls (CrewAI 1.x calls OpenAI models through the ``openai`` SDK, not LiteLLM), the
pairing OpenInference documents for CrewAI. CrewAI's own anonymous telemetry is off
(``CREWAI_DISABLE_TELEMETRY``).

Each agent's role is its name (CrewAI's system prompt is "You are <role>. <backstory>...", the
backstory is the scenario's prompt); tools are ``@tool`` functions, called natively (OpenAI
function calling). The hand-off is CrewAI's delegation: ``support-agent`` has
``allow_delegation=True`` and ``billing-agent`` is its coworker, so the model calls
``delegate_work_to_coworker(task, context, coworker)``; the billing agent works inside that call
and its answer comes back as the tool result, which the support agent's model then gives as its
final answer (``HandOffShape(relays=True)``). A tool exception is caught by CrewAI and shown to
the model. Each turn is a fresh crew with one task (the question) under OpenInference's
``using_attributes(session_id=..., user_id=...)``.
"""

from __future__ import annotations

import agent_harness
import agent_scenario as sc
import harness
from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool
from openinference.instrumentation import using_attributes, using_user
from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODES = {
    "agent-crewai": harness.Mode(
        "on: OpenInference TraceConfig defaults (no OPENINFERENCE_HIDE_* set)",
        env={"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false"},
    ),
}
HANDOFF = sc.HandOffShape(
    sc.ToolCall(
        "delegate_work_to_coworker",
        {
            "task": sc.TURNS[1].question,
            "context": "The customer was charged twice for order A-1002 and needs a refund.",
            "coworker": sc.BILLING_AGENT,
        },
    ),
    relays=True,
)


@tool("lookup_order")
def lookup_order(order_id: str) -> str:
    """Look an order up: its item, status and total."""
    return sc.lookup_order(order_id)


@tool("refund")
def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    return sc.refund(order_id, amount)


def build_crew(rec: agent_harness.AgentRecording, turn: sc.Turn) -> Crew:
    llm = LLM(model=f"openai/{sc.MODEL}", base_url=rec.openai_base_url, api_key="sk-interop-fake")
    support = Agent(
        role=sc.SUPPORT_AGENT,
        goal="Answer the customer's request about an order.",
        backstory=sc.SUPPORT_PROMPT,
        tools=[lookup_order, refund],
        allow_delegation=True,
        llm=llm,
    )
    billing = Agent(
        role=sc.BILLING_AGENT,
        goal="Settle the customer's charges.",
        backstory=sc.BILLING_PROMPT,
        tools=[refund],
        llm=llm,
    )
    task = Task(
        description=turn.question, expected_output="The answer to the customer.", agent=support
    )
    return Crew(agents=[support, billing], tasks=[task])


def record(rec: agent_harness.AgentRecording) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "interop-agent-crewai"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.traces_url)))
    CrewAIInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    outputs = []
    for turn in sc.TURNS:
        crew = build_crew(rec, turn)
        if turn.session_id is not None:
            with using_attributes(session_id=turn.session_id, user_id=sc.USER_ID):
                outputs.append(str(crew.kickoff()))
        else:
            with using_user(sc.USER_ID):
                outputs.append(str(crew.kickoff()))
    provider.force_flush()
    provider.shutdown()
    rec.check_outputs(outputs)
    rec.note(
        "hand-off: CrewAI delegation (support-agent allow_delegation=True, billing-agent its"
        " coworker): delegate_work_to_coworker(task=<question>, context, coworker='billing-agent');"
        " the billing agent runs inside that tool call, the support agent relays its answer"
    )
    rec.note("tool error: refund raises; CrewAI catches it and shows the model the error text")
    rec.note(
        "CrewAI's own telemetry off: CREWAI_DISABLE_TELEMETRY=true, CREWAI_TRACING_ENABLED=false"
    )


if __name__ == "__main__":
    agent_harness.main("agent-crewai", MODES, record, HANDOFF)
