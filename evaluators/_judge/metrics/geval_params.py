"""Which test-case fields a G-Eval judge sees: the names users may give, their labels in the
prompt, and how a case's fields are written into it.

Names are ours (the test-case field names) and deepeval's ``SingleTurnParams`` /
``LLMTestCaseParams`` / ``MultiTurnParams`` members or their values, in any case and with
spaces for underscores (``"actual_output"``, ``"Actual Output"``,
``LLMTestCaseParams.ACTUAL_OUTPUT``)::

    parse_params(["input", "Actual Output"], SINGLE_TURN)   # ("input", "actual_output")
    parse_params(["inptu"], SINGLE_TURN)                     # ParamError naming 'inptu'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# a ConfigError of the tree in spanjudge.errors; re-exported for the metrics that raise it
from spanjudge.errors import ParamError as ParamError
from spanjudge.evaluators._judge.test_case import (
    ConversationalTestCase,
    LLMTestCase,
    ToolCall,
    Turn,
)

SINGLE_TURN: Mapping[str, str] = {
    "input": "Input",
    "actual_output": "Actual Output",
    "expected_output": "Expected Output",
    "context": "Context",
    "retrieval_context": "Retrieval Context",
    "tools_called": "Tools Called",
    "expected_tools": "Expected Tools",
    "metadata": "Metadata",
}
"""Single-turn fields G-Eval can show the judge, with their labels in the prompt."""

TURN_FIELDS: Mapping[str, str] = {
    "role": "Role",
    "content": "Content",
    "retrieval_context": "Retrieval Context",
    "tools_called": "Tools Called",
}
"""Fields of each turn (retrieval context and tool calls are shown on the turns that have them)."""

CONVERSATION_FIELDS: Mapping[str, str] = {
    "scenario": "Scenario",
    "chatbot_role": "Chatbot Role",
    "metadata": "Metadata",
}
"""Fields of the conversation as a whole."""

MULTI_TURN: Mapping[str, str] = {**TURN_FIELDS, **CONVERSATION_FIELDS}
"""Every field :class:`ConversationalGEval` can show the judge."""

ALWAYS_SHOWN_TURN_FIELDS: tuple[str, ...] = ("role", "content")
"""A conversation is unreadable without who said what, so these are always included."""


def _normalise(item: Any) -> str | None:
    """Our field name for one user-given item, or None if it is not text or an enum member."""
    value = getattr(item, "value", item)  # an Enum member (deepeval's params) gives its value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if "." in text:  # "LLMTestCaseParams.ACTUAL_OUTPUT", as str() of a deepeval member reads
        text = text.rsplit(".", 1)[1]
    return "_".join(text.replace("-", " ").lower().split())


def parse_params(given: Any, allowed: Mapping[str, str]) -> tuple[str, ...]:
    """``given`` as our field names, in order, without repeats; ParamError on anything unknown."""
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ParamError(
            "evaluation_params",
            f"expected a list of field names, got {given!r} (allowed: {', '.join(allowed)})",
        )
    if not given:
        raise ParamError("evaluation_params", f"must not be empty (allowed: {', '.join(allowed)})")
    names: list[str] = []
    for item in given:
        name = _normalise(item)
        if name is None or name not in allowed:
            shown = getattr(item, "value", item)
            raise ParamError(
                "evaluation_params",
                f"unknown field {shown!r} (allowed: {', '.join(allowed)})",
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def join_labels(names: Sequence[str], labels: Mapping[str, str]) -> str:
    """``"Input, Actual Output and Context"``: the fields named in prose."""
    shown = [labels[name] for name in names]
    if len(shown) <= 1:
        return "".join(shown)
    return f"{', '.join(shown[:-1])} and {shown[-1]}"


def is_empty(value: Any) -> bool:
    """Whether a case field holds nothing the judge could read."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple, dict)):
        return not value
    return False


def _plain(value: Any) -> Any:
    if isinstance(value, ToolCall):
        return value.model_dump(exclude_none=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def render_value(value: Any) -> str:
    """A field's value as prompt text: strings as they are, everything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(_plain(value), ensure_ascii=False, indent=1, default=str)


def render_case(case: LLMTestCase, names: Sequence[str]) -> str:
    """The chosen fields of a single-turn case, each under its label."""
    return "\n\n".join(
        f"{SINGLE_TURN[name]}:\n{render_value(getattr(case, name))}" for name in names
    )


def render_turn(turn: Turn, names: Sequence[str]) -> dict[str, Any]:
    """One turn as a JSON-ready dict of the chosen turn fields it has."""
    out: dict[str, Any] = {}
    for name in names:
        if name in TURN_FIELDS:
            value = getattr(turn, name)
            if not is_empty(value):
                out[name] = _plain(value)
    return out


def render_conversation(case: ConversationalTestCase, names: Sequence[str]) -> str:
    """The chosen conversation-level fields, then the turns in order as a JSON list."""
    parts = [
        f"{CONVERSATION_FIELDS[name]}:\n{render_value(getattr(case, name))}"
        for name in names
        if name in CONVERSATION_FIELDS
    ]
    turns = [render_turn(turn, names) for turn in case.turns]
    parts.append("Turns:\n" + json.dumps(turns, ensure_ascii=False, indent=1, default=str))
    return "\n\n".join(parts)
