"""The agent scenario every agent-framework recording runs (issue 28): pure data, stdlib only.

Importable from any venv (recorders run in each framework's own venv, the tests in the project's),
so it never imports spanjudge or a third-party package. Like ``scenario.py``, its texts are fixed:
the recorded fixtures and the expected trajectories depend on them.

Two agents: ``support-agent`` with the tools ``lookup_order(order_id)`` and
``refund(order_id, amount)`` and a hand-off to ``billing-agent`` (tool ``refund``). Five turns, each
a fresh run (no history) of the support agent:

1. two tools: a lookup, then a refund, then the answer;
2. the hand-off: support hands over (tool ``transfer_to_billing_agent``, no arguments), billing
   refunds and answers;
3. a tool error: the refund exceeds the order total, ``refund`` raises :class:`ToolError`, the
   answer says so;
4. a loop: the same ``lookup_order`` call, identical arguments, three times, then the answer;
5. unfinished: asked to cancel and refund, the agent looks the order up and answers with its
   status only (no cancel tool exists and no refund is made).

Interface:
- :func:`lookup_order`, :func:`refund`: the tools' behaviour (a recorder wraps them in its
  framework's tool type; ``refund`` raises :class:`ToolError` on turn 3).
- ``TURNS``: the five :class:`Turn` s; ``turn.expected()`` is the :class:`Trajectory` a reader
  should rebuild: the task, the steps in order (:class:`ModelCall`, :class:`ToolExecution`,
  :class:`HandOff`) and the final output.
- :func:`script`: the JSON script for ``spanjudge.testing.agent_model`` that plays the model of
  every turn; ``turn_for_question(text)`` as in ``scenario.py``.

Example::

    from agent_scenario import TURNS, script
    turn = TURNS[2]                      # the tool error
    [error] = [s for s in turn.expected().steps if getattr(s, "error", None)]
    assert error.name == "refund"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUPPORT_AGENT = "support-agent"
BILLING_AGENT = "billing-agent"
HANDOFF_TOOL = "transfer_to_billing_agent"
HANDOFF_CLOSING = "I have passed your request to the billing agent."
SUPPORT_PROMPT = (
    "You are the support agent of an online shop. Look orders up with lookup_order, refund with"
    " refund, and hand billing disputes such as double charges to the billing agent."
)
BILLING_PROMPT = "You are the billing agent of an online shop. Settle charges with refund."
# what tells the two agents' model calls apart: the opening of each one's instructions
SUPPORT_KEY = "You are the support agent"
BILLING_KEY = "You are the billing agent"
SESSION_ID = "agent-sess-1"
USER_ID = "user-7"
MODEL = "gpt-4o-mini"

# order id -> (item, status, total)
ORDERS: dict[str, tuple[str, str, float]] = {
    "A-1001": ("blender", "delivered on 2026-05-03", 62.40),
    "A-1002": ("kettle", "delivered on 2026-05-10", 30.00),
    "A-1003": ("toaster", "delivered on 2026-05-12", 45.00),
    "A-1004": ("mixer", "in transit, arriving 2026-06-02", 89.00),
    "A-1005": ("coffee grinder", "being prepared for shipping", 60.00),
}


class ToolError(Exception):
    """What ``refund`` raises when a refund cannot be made."""


def lookup_order(order_id: str) -> str:
    """The order's item, status and total, as one line of text."""
    item, status, total = ORDERS[order_id]
    return f"Order {order_id}: {item}, {status}, total {total:.2f}."


def refund(order_id: str, amount: float) -> str:
    """Refund ``amount`` on the order; raises :class:`ToolError` above the order total."""
    total = ORDERS[order_id][2]
    if amount > total:
        raise ToolError(f"refund of {amount:.2f} exceeds the order total of {total:.2f}")
    return f"Refunded {amount:.2f} on order {order_id}."


TOOLS = {"lookup_order": lookup_order, "refund": refund}


@dataclass(frozen=True)
class ToolCall:
    """A tool call a model requests."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ModelCall:
    """One model call of ``agent``: the tool calls it requested, or its text."""

    agent: str
    tool_calls: tuple[ToolCall, ...] = ()
    text: str | None = None


@dataclass(frozen=True)
class ToolExecution:
    """One tool run by ``agent``: its arguments and its result, or the error it raised."""

    agent: str
    name: str
    arguments: dict[str, Any]
    result: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class HandOff:
    """Control passed from one agent to another (the transfer tool's call stands for it)."""

    from_agent: str
    to_agent: str


Step = ModelCall | ToolExecution | HandOff


def _default_handoff_call() -> ToolCall:
    return ToolCall(HANDOFF_TOOL, {})


@dataclass(frozen=True)
class HandOffShape:
    """How a framework hands over: the call the model makes for it (Strands' swarm:
    ``handoff_to_agent(agent_name, message)``), and whether the handing agent's model is called
    once more after the hand-off: ``closing``, it then answers ``HANDOFF_CLOSING`` and the
    other agent answers the user; ``relays``, the other agent runs inside the hand-off call
    (CrewAI's delegation) and the handing agent's model then gives its answer as the final one.
    """

    call: ToolCall = field(default_factory=_default_handoff_call)
    closing: bool = False
    relays: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "call": {"name": self.call.name, "arguments": self.call.arguments},
            "closing": self.closing,
            "relays": self.relays,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> HandOffShape:
        if not data:
            return cls()
        call = data["call"]
        return cls(
            ToolCall(call["name"], dict(call.get("arguments") or {})),
            bool(data.get("closing")),
            bool(data.get("relays")),
        )


@dataclass(frozen=True)
class Trajectory:
    """What a reader should rebuild from one turn's spans."""

    task: str
    steps: tuple[Step, ...]
    final_output: str
    final_agent: str

    @property
    def tool_executions(self) -> list[ToolExecution]:
        return [s for s in self.steps if isinstance(s, ToolExecution)]

    @property
    def model_calls(self) -> list[ModelCall]:
        return [s for s in self.steps if isinstance(s, ModelCall)]


def _run(agent: str, name: str, **arguments: Any) -> tuple[ModelCall, ToolExecution]:
    """A model call requesting one tool, and that tool's execution (result or error)."""
    call = ModelCall(agent, (ToolCall(name, arguments),))
    try:
        return call, ToolExecution(agent, name, arguments, result=TOOLS[name](**arguments))
    except ToolError as exc:
        return call, ToolExecution(agent, name, arguments, error=str(exc))


@dataclass(frozen=True)
class Turn:
    """One user turn: the question, the planted behaviour, the steps and the answer."""

    number: int
    kind: str  # two-tools, hand-off, tool-error, loop, unfinished
    question: str
    steps: tuple[Step, ...]
    answer: str
    session_id: str | None = SESSION_ID
    notes: tuple[str, ...] = field(default=())

    @property
    def final_agent(self) -> str:
        handed = [s.to_agent for s in self.steps if isinstance(s, HandOff)]
        return handed[-1] if handed else SUPPORT_AGENT

    def expected(self, handoff: HandOffShape | None = None) -> Trajectory:
        """The trajectory, with the hand-off in the framework's shape (default: the model calls
        ``transfer_to_billing_agent()`` and the support agent's model is not called again)."""
        shape = handoff or HandOffShape()
        steps: list[Step] = []
        for step in self.steps:
            if isinstance(step, ModelCall) and any(c.name == HANDOFF_TOOL for c in step.tool_calls):
                calls = tuple(shape.call if c.name == HANDOFF_TOOL else c for c in step.tool_calls)
                step = ModelCall(step.agent, calls, step.text)
            steps.append(step)
            if isinstance(step, HandOff) and shape.closing and not shape.relays:
                steps.append(ModelCall(step.from_agent, text=HANDOFF_CLOSING))
        final_agent = self.final_agent
        if shape.relays and final_agent != SUPPORT_AGENT:
            steps.append(ModelCall(final_agent, text=self.answer))
            final_agent = SUPPORT_AGENT
        final = ModelCall(final_agent, text=self.answer)
        return Trajectory(self.question, (*steps, final), self.answer, final_agent)

    def replies(self, agent: str, handoff: HandOffShape | None = None) -> list[dict[str, Any]]:
        """The scripted model replies of ``agent`` in this turn (agent_model's JSON form). The
        agent that hands off always gets the closing text after its hand-off call: a framework
        that calls its model again then ends that agent's part instead of looping."""
        given = handoff or HandOffShape()
        shape = HandOffShape(given.call, closing=True, relays=given.relays)
        return [
            {"tool_calls": [{"name": c.name, "arguments": c.arguments} for c in s.tool_calls]}
            if s.tool_calls
            else {"content": s.text}
            for s in self.expected(shape).model_calls
            if s.agent == agent
        ]


def _steps(*pairs: tuple[ModelCall, ToolExecution]) -> tuple[Step, ...]:
    return tuple(step for pair in pairs for step in pair)


TURNS: tuple[Turn, ...] = (
    Turn(
        1,
        "two-tools",
        "What is the status of order A-1001? Please also refund its 12.50 shipping fee.",
        _steps(
            _run(SUPPORT_AGENT, "lookup_order", order_id="A-1001"),
            _run(SUPPORT_AGENT, "refund", order_id="A-1001", amount=12.5),
        ),
        "Order A-1001 (blender) was delivered on 2026-05-03, and I refunded the 12.50"
        " shipping fee.",
    ),
    Turn(
        2,
        "hand-off",
        "I was charged twice for order A-1002. Please refund the duplicate charge of 30.00.",
        (
            ModelCall(SUPPORT_AGENT, (ToolCall(HANDOFF_TOOL, {}),)),
            HandOff(SUPPORT_AGENT, BILLING_AGENT),
            *_run(BILLING_AGENT, "refund", order_id="A-1002", amount=30.0),
        ),
        "I refunded the duplicate charge of 30.00 on order A-1002.",
    ),
    Turn(
        3,
        "tool-error",
        "Please refund 80.00 for order A-1003.",
        _steps(_run(SUPPORT_AGENT, "refund", order_id="A-1003", amount=80.0)),
        "I could not refund 80.00 on order A-1003: it exceeds the order total of 45.00.",
    ),
    Turn(
        4,
        "loop",
        "Where is my order A-1004?",
        _steps(*[_run(SUPPORT_AGENT, "lookup_order", order_id="A-1004")] * 3),
        "Order A-1004 (mixer) is in transit and arrives on 2026-06-02.",
    ),
    Turn(
        5,
        "unfinished",
        "Cancel order A-1005 and refund the full 60.00.",
        _steps(_run(SUPPORT_AGENT, "lookup_order", order_id="A-1005")),
        "Order A-1005 (coffee grinder) is being prepared for shipping.",
        session_id=None,
        notes=("asked to cancel and refund; neither is done, the answer gives the status only",),
    ),
)


def script(handoff: HandOffShape | None = None) -> dict[str, Any]:
    """The ``spanjudge.testing.agent_model`` script playing every turn's model (``handoff``: as
    in :meth:`Turn.expected`).

    The support agent's replies are told from the billing agent's by the system prompt, which a
    framework sends as the agent's instructions; ``name`` (``t<turn>s``/``t<turn>b``) makes the
    tool-call ids unique per turn and agent.
    """
    conversations = []
    for turn in TURNS:
        for agent, system, tag in (
            (SUPPORT_AGENT, SUPPORT_KEY, "s"),
            (BILLING_AGENT, BILLING_KEY, "b"),
        ):
            replies = turn.replies(agent, handoff)
            if replies:
                conversations.append(
                    {
                        "user": turn.question,
                        "system": system,
                        "name": f"t{turn.number}{tag}",
                        "replies": replies,
                    }
                )
    return {"model": MODEL, "conversations": conversations}


def turn_for_question(text: str) -> Turn | None:
    """The turn whose question is ``text`` (or is contained in it), else None."""
    for turn in TURNS:
        if turn.question in text:
            return turn
    return None
