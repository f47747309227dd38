"""Record the scenario traced by OpenLLMetry (``traceloop-sdk`` and its openai instrumentation).

``Traceloop.init`` exports with an ``OTLPSpanExporter`` to the capture server, unbatched, with
only the OpenAI instrumentation on; the agent turn is an ``@agent``, the retrieval a ``@task``,
and the session and user are association properties (``Associations.set``) set before each
turn (turn 5 sets only the user).  Content capture is ``TRACELOOP_TRACE_CONTENT``.
Run by ``record.sh openllmetry``.
"""

from __future__ import annotations

from typing import Any

import harness
import scenario
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from traceloop.sdk import Traceloop
from traceloop.sdk.associations.associations import AssociationProperty, Associations
from traceloop.sdk.decorators import agent, task
from traceloop.sdk.instruments import Instruments

MODES = {
    "openllmetry": harness.Mode(
        "on: TRACELOOP_TRACE_CONTENT=true", {"TRACELOOP_TRACE_CONTENT": "true"}
    ),
    "openllmetry-nocontent": harness.Mode(
        "off: TRACELOOP_TRACE_CONTENT=false", {"TRACELOOP_TRACE_CONTENT": "false"}
    ),
}


def record(rec: harness.Recording) -> None:
    Traceloop.init(
        app_name="interop-openllmetry",
        exporter=OTLPSpanExporter(endpoint=rec.traces_url),
        disable_batch=True,
        telemetry_enabled=False,
        instruments={Instruments.OPENAI},
    )
    client = OpenAI(base_url=rec.openai_base_url, api_key="sk-interop-fake")

    @task(name="retrieve")
    def retrieve(query: str) -> list[dict[str, Any]]:
        turn = scenario.turn_for_question(query)
        assert turn is not None
        return [{"id": d.id, "score": d.score, "text": d.text} for d in turn.documents()]

    @agent(name=scenario.AGENT_NAME)
    def support_agent(question: str) -> str:
        docs = retrieve(question)
        context = "\n".join(d["text"] for d in docs)
        completion = client.chat.completions.create(
            model=scenario.MODEL,
            messages=[
                {
                    "role": "system",
                    "content": scenario.SYSTEM_PROMPT_TEMPLATE.format(context=context),
                },
                {"role": "user", "content": question},
            ],
        )
        return completion.choices[0].message.content or ""

    for turn in scenario.TURNS:
        # Set before the turn so the agent span itself carries them; each call replaces the
        # previous turn's set, so turn 5 carries the user only.
        associations = [(AssociationProperty.USER_ID, scenario.USER_ID)]
        if turn.session_id:
            associations.append((AssociationProperty.SESSION_ID, turn.session_id))
        Associations.set(associations)
        support_agent(turn.question)
    rec.note(
        "OTel SDK 1.45.1 / contrib 0.66b1: traceloop-sdk needs "
        "opentelemetry-instrumentation-sqlalchemy, which the registry lacks at 0.66b2"
    )
    provider: Any = trace.get_tracer_provider()
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    harness.main("openllmetry", MODES, record)
