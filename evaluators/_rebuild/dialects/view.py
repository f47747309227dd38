"""The one reading of a span that targets, filters and case rebuild use: :class:`GenAIView`.

Every instrumentation names the same things differently (a session is ``gen_ai.conversation.id``,
``session.id`` or ``traceloop.association.properties.session_id``; an answer sits in
``gen_ai.output.messages``, ``output.value``, ``traceloop.entity.output`` or ``final_result``...).
A dialect turns one span into this view; nothing past the dialects reads raw attribute names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from spanjudge._core.span_record import SpanRecord

ViewKind = Literal["agent", "llm", "retriever", "tool", "chain"]


@dataclass(slots=True)
class Document:
    """One retrieved document: its text (``None`` when the span carries only id and score)."""

    text: str | None
    id: str | None = None
    score: float | None = None


@dataclass(slots=True)
class ToolCallView:
    name: str
    arguments: Any = None
    result: Any = None
    call_id: str | None = None
    description: str | None = None


@dataclass(slots=True)
class GenAIView:
    """What a span is and says, whatever wrote it.

    * ``dialect``: who wrote it (``spanjudge``, ``genai-semconv``, ``openinference``,
      ``openllmetry``, ``pydantic-ai``, ``vercel-ai``, ``openlit``, ``litellm``), ``None`` when
      no dialect recognised the span;
    * ``kind``: ``agent`` (a turn), ``llm`` (a model call), ``retriever``, ``tool``, ``chain``
      (any other step), ``None`` for spans that are not GenAI steps;
    * ``input_text`` / ``output_text``: the turn's or call's question and answer;
    * ``system_text``: system instructions the model was given (a fallback context source);
    * ``documents``: retrieved documents (``None``: the span lists none);
    * ``input_tokens`` / ``output_tokens``: the model call's token usage, in the current
      semconv names or the older ``prompt``/``completion`` ones;
    * ``notes``: per field, why it is empty (a bad value, a size limit, a Python repr);
    * ``found``: per field that is set, how it was found (``"openinference attributes"``,
      ``"event gen_ai.choice"``); the tree rules add theirs when a case is rebuilt;
    * ``prompt_documents``: documents the input prompt carried in a marked block
      (``<memory>...</memory>``), taken out of ``input_text``;
    * ``error``: a step's error as a declared reader found it (the tree rules read the span's
      status and exception events themselves);
    * ``capture_off``: set when the span says its content was not captured on purpose, naming
      the instrumentation's setting, so a skip can tell the user what to switch on.
    """

    span: SpanRecord
    dialect: str | None = None
    kind: ViewKind | None = None
    conversation_id: str | None = None
    user_id: str | None = None
    agent_name: str | None = None
    model: str | None = None
    response_id: str | None = None
    input_text: str | None = None
    output_text: str | None = None
    system_text: str | None = None
    documents: list[Document] | None = None
    tool: ToolCallView | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    notes: dict[str, str] = field(default_factory=dict)
    found: dict[str, str] = field(default_factory=dict)
    capture_off: str | None = None
    error: str | None = None
    prompt_documents: list[str] = field(default_factory=list)

    def note(self, field_name: str, why: str) -> None:
        self.notes.setdefault(field_name, why)

    def source(self, field_name: str, how: str) -> None:
        """Record how ``field_name`` was found (the first source wins)."""
        self.found.setdefault(field_name, how)

    @property
    def document_texts(self) -> list[str]:
        return [d.text for d in self.documents or () if d.text and d.text.strip()]
