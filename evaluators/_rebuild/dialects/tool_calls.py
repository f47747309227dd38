"""Tool calls inside a model's output, in every shape: OpenAI ``tool_calls`` (and the legacy
``function_call``), semconv ``tool_call`` parts, Anthropic ``tool_use``, Bedrock/Strands
``toolUse``, Gemini ``functionCall``; and the final-answer tool some agent frameworks answer
through (smolagents' ``final_answer``, pydantic-ai's ``final_result``), whose arguments are the
answer rather than a step.

Example::

    only_tool_calls([{"role": "assistant", "parts": [{"type": "tool_call", "name": "f"}]}])  # True
    final_answer("final_answer", '{"answer": "Yes."}')  # 'Yes.'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spanjudge.evaluators._rebuild.dialects import message_text as text

FINAL_ANSWER_TOOL = re.compile(r"(?i)^final[_ -]?(answer|result|output|response)$")


def final_answer(name: Any, arguments: Any) -> str | None:
    """The answer a call to a final-answer tool carries (``final_answer(answer="...")``), or
    ``None`` when ``name`` is another tool or the arguments hold no text."""
    if not isinstance(name, str) or not FINAL_ANSWER_TOOL.match(name.strip()):
        return None
    return text.captured_text(
        text.maybe_json(arguments), ("answer", *text.OUTPUT_KEYS), want_input=False
    )


TOOL_CALL_PART_KEYS = frozenset(
    {"toolUse", "tool_use", "functionCall", "function_call", "function"}
)
TOOL_CALL_PART_TYPES = frozenset({"tool_call", "tool_use", "function_call", "server_tool_call"})


def tool_call_parts(message: Any) -> list[Mapping[str, Any]] | None:
    """The tool calls a message (or bare block list) holds, when it holds nothing else but
    tool calls (OpenAI ``tool_calls``, semconv ``tool_call`` parts, Anthropic ``tool_use``,
    Bedrock/Strands ``toolUse``, Gemini ``functionCall``); ``None`` when it holds text or
    nothing."""
    message = text.maybe_json(message)
    if isinstance(message, Mapping):
        if text.message_text(message):
            return None
        parts = message.get("tool_calls") or message.get("parts") or message.get("content")
    else:
        parts = message
    if not isinstance(parts, list) or not parts:
        return None
    calls = []
    for part in parts:
        if not isinstance(part, Mapping):
            return None
        inner = next(
            (part[k] for k in TOOL_CALL_PART_KEYS if isinstance(part.get(k), Mapping)), None
        )
        if inner is not None:
            calls.append(inner)
        elif part.get("type") in TOOL_CALL_PART_TYPES:
            calls.append(part)
        else:
            return None
    return calls


def final_answer_of(messages: list[Any]) -> str | None:
    """The answer carried by a final-answer tool call among ``messages``' tool calls."""
    for message in messages:
        for call in tool_call_parts(message) or ():
            arguments = call.get("arguments", call.get("input", call.get("args")))
            answer = final_answer(call.get("name"), arguments)
            if answer:
                return answer
    return None


def only_tool_calls(messages: list[Any]) -> bool:
    """True when every message holds tool calls and nothing else (a tool round trip)."""
    return bool(messages) and all(tool_call_parts(m) for m in messages)
