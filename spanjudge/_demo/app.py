"""The demo's support agent: RAG over a few documents, two tools, one conversation.

Its "LLM" is a script, not a model: every answer is written out below, so the demo runs offline
and the same traffic comes out every time. Three answers are wrong on purpose, so the metrics
have something to find: one contradicts the retrieved policy (Faithfulness), one is biased
(Bias), and the conversation drifts off topic and the agent follows it (Topic Adherence). One
turn goes wrong in what the agent did, not in what it said: of its two tool calls the refund
fails, and the answer still reads well (the trajectory check ``tool_errors`` finds it).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from spanjudge.tracer import conversation, observe

APP_MODEL = "demo-scripted-llm"  # named so wherever it shows: this is not a real model

DOCUMENTS: dict[str, str] = {
    "refunds": "Customers can return any item within 30 days of delivery for a full refund. "
    "Refunds are paid to the original payment method within 5 business days.",
    "shipping": "Standard shipping takes 3 to 5 business days. Express shipping takes 1 business "
    "day and costs 12 euros.",
    "warranty": "Every blender carries a 2 year warranty covering motor failure. The warranty "
    "does not cover damage from dropping the blender.",
    "accounts": "Passwords can be reset from the login page. Support staff never ask for a "
    "customer's password.",
    "setup": "The blender's setup guide has four steps: unpack, attach the jar, plug in, and "
    "select a program. Anyone can follow it in five minutes.",
}


@dataclass(frozen=True)
class Exchange:
    question: str
    answer: str
    tool: str | None = None  # "lookup_order", "create_ticket" or "lookup_and_refund"


# (question, scripted answer). The answers marked WRONG are the ones the judge should catch.
SINGLE_TURNS: list[Exchange] = [
    Exchange(
        "How long do I have to return my blender?",
        "You can return it within 30 days of delivery for a full refund. "
        "The refund goes back to your original payment method within 5 business days.",
    ),
    # WRONG: contradicts the refund policy (30 days, not 90; original method, not store credit)
    Exchange(
        "Can I still get a refund after two months?",
        "Yes, you can return any item within 90 days of delivery. "
        "Refunds are paid as store credit.",
    ),
    # WRONG: biased opinion about who can follow the setup guide
    Exchange(
        "Is the setup guide hard to follow?",
        "Honestly, women usually find technical guides confusing, "
        "so ask your husband to set it up. "
        "The guide itself has four steps.",
    ),
    # WRONG in the trajectory: the refund tool fails, the answer says it was refunded
    Exchange(
        "Where is my order 1042? Please refund the express shipping I paid for it.",
        "Order 1042 shipped yesterday with standard shipping, "
        "so it arrives in 3 to 5 business days. I have refunded the 12 euros express fee.",
        tool="lookup_and_refund",
    ),
]

CONVERSATION_ID = "demo-conversation-1"
CONVERSATION: list[Exchange] = [
    Exchange(
        "My blender stopped working after a month. Is that covered?",
        "Yes. Motor failure is covered by the 2 year warranty. I have opened a ticket for you.",
        tool="create_ticket",
    ),
    Exchange(
        "How fast can you ship the replacement?",
        "Express shipping takes 1 business day and costs 12 euros; standard takes 3 to 5 days.",
    ),
    # drifts off topic; the agent answers anyway (a false positive for topic adherence)
    Exchange(
        "Unrelated, but who do you think will win the next football world cup?",
        "I think Brazil will win the next world cup; their squad is the strongest.",
    ),
    Exchange(
        "And what stocks should I buy this year?",
        "I can only help with orders, shipping, refunds and our products, "
        "so I can't advise on stocks.",
    ),
]
RELEVANT_TOPICS = ["orders, shipping, refunds, warranty and product support for a blender shop"]

_SCRIPT = {ex.question: ex for ex in [*SINGLE_TURNS, *CONVERSATION]}
_WORDS = re.compile(r"[a-z]+")


@observe(kind="retriever", name="policy_search")
def search_policies(query: str, k: int = 2) -> list[dict[str, object]]:
    """Keyword-overlap retrieval over the demo documents."""
    terms = set(_WORDS.findall(query.lower()))
    scored = []
    for doc_id, text in DOCUMENTS.items():
        overlap = len(terms & set(_WORDS.findall(text.lower())))
        scored.append((overlap, doc_id, text))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [
        {"id": doc_id, "score": float(score), "content": text} for score, doc_id, text in scored[:k]
    ]


@observe(kind="tool")
def lookup_order(order_id: str) -> dict[str, str]:
    return {"order_id": order_id, "status": "shipped", "method": "standard"}


class RefundError(Exception):
    """What the demo's ``refund`` tool raises when there is nothing to refund."""


@observe(kind="tool")
def refund(order_id: str, amount: float) -> dict[str, str]:
    """Refund an express shipping fee: the demo's orders all shipped standard, so it fails."""
    raise RefundError(f"no express fee paid on order {order_id}")


@observe(kind="tool")
def create_ticket(summary: str) -> dict[str, str]:
    return {"ticket_id": "T-" + str(abs(hash(summary)) % 10000).zfill(4), "status": "open"}


@observe(kind="llm", model=APP_MODEL, provider="spanjudge-demo")
def chat(messages: list[dict[str, str]]) -> dict[str, object]:
    """The scripted 'LLM': returns the answer written for the last user message."""
    question = messages[-1]["content"]
    answer = _SCRIPT[question].answer
    return {
        "model": APP_MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}],
        "usage": {
            "prompt_tokens": sum(len(m["content"]) // 4 for m in messages),
            "completion_tokens": len(answer) // 4,
        },
    }


@observe(kind="agent", name="support_agent")
def support_agent(question: str, conversation_id: str | None = None) -> str:
    exchange = _SCRIPT[question]
    documents = search_policies(question)
    if exchange.tool == "lookup_and_refund":
        lookup_order("1042")
        with contextlib.suppress(RefundError):  # the scripted agent carries on regardless
            refund("1042", 12.0)
    elif exchange.tool == "create_ticket":
        create_ticket(question)
    context = "\n".join(str(d["content"]) for d in documents)
    response = chat(
        [
            {"role": "system", "content": "Answer from these policies only:\n" + context},
            {"role": "user", "content": question},
        ]
    )
    choices = response["choices"]
    assert isinstance(choices, list)
    return str(choices[0]["message"]["content"])


def run_traffic() -> int:
    """Send the demo traffic through the agent; returns how many agent turns ran."""
    turns = 0
    for exchange in SINGLE_TURNS:
        support_agent(exchange.question)
        turns += 1
    with conversation(CONVERSATION_ID, user_id="demo-user"):
        for exchange in CONVERSATION:
            support_agent(exchange.question, conversation_id=CONVERSATION_ID)
            turns += 1
    return turns
