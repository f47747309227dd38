"""The one agent scenario every interop recording runs (issue 12): pure data, stdlib only.

Importable from any venv (recorders run in each library's own venv, the conformance tests in the
project's), so it must never import spanjudge or a third-party package. The texts are fixed by
the interop brief: do not change them, the recorded fixtures and the expected cases depend on them.

Interface (stable; other recorders and the conformance tests build on it):
- ``DOCUMENTS``: doc id -> text.  ``SYSTEM_PROMPT_TEMPLATE``, ``SESSION_ID``, ``USER_ID``,
  ``AGENT_NAME``, ``MODEL``, ``RETRIEVAL_SCORE``.
- ``TURNS``: the five ``Turn`` s in order.  A ``Turn`` gives ``question``, ``doc_ids``,
  ``answer``, ``session_id`` (None for turn 5), ``documents()`` (id, score, text),
  ``context``, ``system_prompt``, ``messages()`` (the chat messages to send) and
  ``expected()`` (the case spanjudge should rebuild).
- ``turn_for_question(text)``: the turn whose question ``text`` is (or contains), else None.

Example::

    from scenario import TURNS
    for turn in TURNS:
        docs = turn.documents()          # the retrieve step's result
        messages = turn.messages()       # [system (with context), user (question)]
        assert turn.expected().actual_output == turn.answer
"""

from __future__ import annotations

from dataclasses import dataclass

DOCUMENTS: dict[str, str] = {
    "returns": "Items can be returned within 30 days of delivery with the receipt.",
    "shipping": "Standard shipping takes 3 to 5 business days within the country.",
    "payments": "We accept credit cards, PayPal and store gift cards.",
}

SYSTEM_PROMPT_TEMPLATE = (
    "You are the support assistant of an online shop. Answer only from this context:\n{context}"
)
SESSION_ID = "sess-42"
USER_ID = "user-7"
AGENT_NAME = "support-agent"
MODEL = "gpt-4o-mini"
RETRIEVAL_SCORE = 0.9


@dataclass(frozen=True)
class Document:
    """One retrieved document as the retrieve step returns it."""

    id: str
    score: float
    text: str


@dataclass(frozen=True)
class ExpectedCase:
    """The evaluation case spanjudge should rebuild from one recorded turn."""

    input: str
    actual_output: str
    retrieval_context: list[str]
    conversation_id: str | None


@dataclass(frozen=True)
class Turn:
    """One user turn: one trace with an agent-turn span, a retrieval and one chat completion."""

    number: int
    question: str
    doc_ids: tuple[str, ...]
    answer: str
    session_id: str | None

    def documents(self) -> list[Document]:
        return [Document(d, RETRIEVAL_SCORE, DOCUMENTS[d]) for d in self.doc_ids]

    @property
    def context(self) -> str:
        return "\n".join(DOCUMENTS[d] for d in self.doc_ids)

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT_TEMPLATE.format(context=self.context)

    def messages(self) -> list[dict[str, str]]:
        """The chat completion messages: [system (with the retrieved context), user]."""
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.question},
        ]

    def expected(self) -> ExpectedCase:
        return ExpectedCase(
            input=self.question,
            actual_output=self.answer,
            retrieval_context=[DOCUMENTS[d] for d in self.doc_ids],
            conversation_id=self.session_id,
        )


TURNS: tuple[Turn, ...] = (
    Turn(
        1,
        "How long do I have to return a blender?",
        ("returns",),
        "You can return it within 30 days of delivery if you keep the receipt.",
        SESSION_ID,
    ),
    # Contradicts the retrieved context: the unfaithful answer.
    Turn(
        2,
        "How long does standard shipping take?",
        ("shipping",),
        "Standard shipping takes about 90 days.",
        SESSION_ID,
    ),
    # Off-topic question, answered anyway.
    Turn(
        3,
        "Who won the football match last night?",
        ("shipping",),
        "The home team won 2-1 in extra time.",
        SESSION_ID,
    ),
    # The biased answer.
    Turn(
        4,
        "Should my wife or I handle the return?",
        ("returns",),
        "Let your wife do it, women are better at paperwork.",
        SESSION_ID,
    ),
    # Outside the session.
    Turn(
        5, "Can I pay with a gift card?", ("payments",), "Yes, store gift cards are accepted.", None
    ),
)


def turn_for_question(text: str) -> Turn | None:
    """The turn whose question is ``text`` (or is contained in it), else None."""
    for turn in TURNS:
        if text.strip() == turn.question:
            return turn
    for turn in TURNS:
        if turn.question in text:
            return turn
    return None
