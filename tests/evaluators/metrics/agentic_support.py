"""Trajectories the judged agent metric tests share: an order-support agent with two tools,
one failing call, a plan, and a 10,000-step loop."""

from __future__ import annotations

from typing import Any

from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.evaluators._rebuild.trajectory import (
    Step,
    ToolDefinition,
    ToolRequest,
    Trajectory,
)

TASK = "Cancel order 7 and email me a confirmation."


def support_trajectory(*, plan: bool = False) -> Trajectory:
    """model -> lookup_order -> cancel_order -> send_email (fails) -> final answer."""
    steps: list[Step] = []
    if plan:
        steps.append(
            Step(0, "plan", "plan", "p0", result="1. look up order 7\n2. cancel it\n3. send email")
        )
    base = len(steps)
    steps += [
        Step(
            base, "model_call", "gpt-4o-mini", "m0",
            tool_calls=[ToolRequest("lookup_order", {"id": 7}, "c1")],
        ),
        Step(base + 1, "tool_call", "lookup_order", "t1", arguments={"id": 7},
             result={"status": "open"}),
        Step(base + 2, "tool_call", "cancel_order", "t2", arguments={"id": 7},
             result={"ok": True}),
        Step(base + 3, "tool_call", "send_email", "t3", arguments={"to": "me"},
             error="SMTPError: connection refused"),
        Step(base + 4, "model_call", "gpt-4o-mini", "m1",
             result="Order 7 is cancelled and a confirmation email is on its way."),
    ]  # fmt: skip
    return Trajectory(
        "agent",
        "trace-1",
        "turn-1",
        task=TASK,
        final_output="Order 7 is cancelled and a confirmation email is on its way.",
        agent="support",
        steps=steps,
        tools_available=[
            ToolDefinition("lookup_order", "Find an order by id"),
            ToolDefinition("cancel_order", "Cancel an order by id"),
            ToolDefinition("send_email", "Send an email"),
            ToolDefinition("refund_order", "Refund an order"),
        ],
    )


def case_of(trajectory: Trajectory | None, **fields: Any) -> LLMTestCase:
    data: dict[str, Any] = {"input": TASK, "actual_output": "done", **fields}
    return LLMTestCase(trajectory=trajectory, **data)


def long_trajectory(n: int = 10_000) -> Trajectory:
    """``n`` identical search calls, each result 5,000 characters long."""
    steps = [
        Step(i, "tool_call", "search", f"s{i}", arguments={"q": "x" * 2_000}, result="r" * 5_000)
        for i in range(n)
    ]
    return Trajectory("agent", "t", "s", task=TASK, final_output="gave up", steps=steps,
                      steps_dropped=25)  # fmt: skip
