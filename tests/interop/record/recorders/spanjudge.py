"""Record the scenario traced by spanjudge's own ``@observe``: the baseline of the interop tests.

The agent turn, the retrieval and the chat completion are ``@observe(kind="agent" | "retriever" |
"llm")`` functions; turns 1-4 run inside ``conversation(SESSION_ID, user_id=USER_ID)``. The LLM
function posts the turn's messages to the harness's fake OpenAI server (plain ``urllib``, so no
client library is involved) and returns the response, which ``@observe`` captures as the output.
Spans leave through ``spanjudge.configure``'s standard OTLP/HTTP protobuf exporter.

This recorder runs in the project's own venv (its requirements are the project), not in an
``interop-envs`` venv; from the repository root::

    INTEROP_REQUIREMENTS=tests/interop/record/requirements/spanjudge.txt \\
    PYTHONPATH=tests/interop/record PYTHONSAFEPATH=1 \\
      .ci-venv/bin/python tests/interop/record/recorders/spanjudge.py
    PYTHONPATH=tests/interop/record .ci-venv/bin/python tests/interop/record/summarize.py spanjudge

``PYTHONSAFEPATH=1`` matters twice over here: this file is named like the package it records.
"""

from __future__ import annotations

import json
import urllib.request
from contextlib import ExitStack
from typing import Any

import harness
import scenario

import spanjudge
from spanjudge.tracer import conversation, observe

MODES = {
    "spanjudge": harness.Mode(
        "on (spanjudge default: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT unset)"
    ),
}


def record(rec: harness.Recording) -> None:
    tracing = spanjudge.configure(service_name="interop-spanjudge", otlp_endpoint=rec.otlp_endpoint)

    @observe(kind="retriever", name="retrieve")
    def retrieve(query: str) -> list[dict[str, Any]]:
        turn = scenario.turn_for_question(query)
        assert turn is not None
        return [{"id": d.id, "score": d.score, "content": d.text} for d in turn.documents()]

    @observe(kind="llm", model=scenario.MODEL, provider="openai")
    def chat(messages: list[dict[str, str]]) -> dict[str, Any]:
        body = json.dumps({"model": scenario.MODEL, "messages": messages}).encode()
        request = urllib.request.Request(
            rec.openai_base_url.rstrip("/") + "/chat/completions",
            data=body,
            headers={"Content-Type": "application/json", "Authorization": "Bearer sk-fake"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    @observe(kind="agent", name=scenario.AGENT_NAME)
    def support_agent(question: str) -> str:
        docs = retrieve(question)
        context = "\n".join(d["content"] for d in docs)
        system = scenario.SYSTEM_PROMPT_TEMPLATE.format(context=context)
        completion = chat(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ]
        )
        return str(completion["choices"][0]["message"]["content"])

    for turn in scenario.TURNS:
        with ExitStack() as stack:
            if turn.session_id:
                stack.enter_context(conversation(turn.session_id, user_id=scenario.USER_ID))
            support_agent(turn.question)
    tracing.force_flush()
    tracing.shutdown()


if __name__ == "__main__":
    harness.main("spanjudge", MODES, record)
