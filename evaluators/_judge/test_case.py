"""Test cases: what a metric evaluates, built by hand or rebuilt from spans.

Field names match deepeval's so existing suites carry over::

    case = LLMTestCase(
        input="What if these shoes don't fit?",
        actual_output="We offer a 30-day full refund at no extra cost.",
        retrieval_context=["All customers are eligible for a 30 day full refund."],
    )
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from spanjudge._core.checked_model import CheckedModel


class _Model(CheckedModel):
    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=True)


class ToolCall(_Model):
    """One tool invocation made by the application under test."""

    name: str = Field(min_length=1)
    input_parameters: dict[str, Any] | None = None
    output: Any = None
    description: str | None = None
    reasoning: str | None = None


class LLMTestCase(_Model):
    """A single-turn interaction: one input, one output, and what the model was given."""

    input: str
    actual_output: str
    expected_output: str | None = None
    context: list[str] | None = None
    retrieval_context: list[str] | None = None
    tools_called: list[ToolCall] | None = None
    expected_tools: list[ToolCall] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    trajectory: Any = Field(default=None, exclude=True)
    """What the agent did (a :class:`~spanjudge.evaluators._rebuild.trajectory.Trajectory`)
    when the case was rebuilt from an agent's spans; not part of deepeval's case, never
    serialised (a judge-cache key stays the same with or without it)."""


class Turn(_Model):
    """One message of a conversation."""

    role: Literal["user", "assistant"]
    content: str
    retrieval_context: list[str] | None = None
    tools_called: list[ToolCall] | None = None
    metadata: dict[str, Any] | None = None
    trajectory: Any = Field(default=None, exclude=True)
    """The assistant turn's trajectory, as on :class:`LLMTestCase`."""


class ConversationalTestCase(_Model):
    """A multi-turn conversation, turns in time order."""

    turns: list[Turn] = Field(min_length=1)
    scenario: str | None = None
    chatbot_role: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("turns")
    @classmethod
    def _turns_not_empty(cls, turns: list[Turn]) -> list[Turn]:
        if not turns:
            raise ValueError("a conversation needs at least one turn")
        return turns


TestCase = LLMTestCase | ConversationalTestCase
