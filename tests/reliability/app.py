"""The traced app the reliability tests run: agent turns made of a retrieval and an LLM call,
recorded by the real ``@observe`` tracer. Two agent names let a rule (filter ``agent``) route one
target to a faulty judge while the others go to a healthy one."""

from __future__ import annotations

from spanjudge.tracer import observe
from tests.evaluators.loop.test_monitor_e2e import agent, chat, search

ANSWER = "Returns are possible within 30 days of delivery."
SPANS_PER_TURN = 3  # agent + retrieval + llm


class AppError(Exception):
    """Raised by the app itself; it must reach the caller as the same object."""


@observe(kind="agent", name="flaky")
def flaky_agent(question: str, answer: str = ANSWER) -> str:
    """Same shape as ``agent`` (agent name "support"), under another agent name."""
    return chat([{"role": "user", "content": question + " " + " ".join(search(question))}], answer)


@observe(kind="agent", name="support")
def failing_agent(question: str, error: AppError) -> str:
    search(question)
    raise error


__all__ = ["ANSWER", "SPANS_PER_TURN", "AppError", "agent", "failing_agent", "flaky_agent"]
