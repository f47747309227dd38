"""Reading an OpenAI-style chat completion, whether litellm's response objects or the plain JSON
the direct path receives: the answer text (a forced tool call's arguments, else the content),
finish reason, token usage and token log-probabilities.

Example::

    text = answer_text(message(body))
    tokens_in, tokens_out = token_usage(body)
"""

from __future__ import annotations

import json
from typing import Any

from spanjudge.evaluators._judge.judges.base import TokenLogprob


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` for a dict, ``obj.name`` otherwise; None when absent."""
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def first_choice(response: Any) -> Any:
    choices = field(response, "choices")
    try:
        return choices[0] if choices else None
    except (IndexError, KeyError, TypeError):
        return None


def answer_text(message: Any) -> str:
    """The answer in a chat message: a forced tool call's arguments, else the content."""
    for call in field(message, "tool_calls") or []:
        arguments = field(field(call, "function"), "arguments")
        if isinstance(arguments, str) and arguments.strip():
            return arguments
        if isinstance(arguments, dict):
            return json.dumps(arguments)
    content = field(message, "content")
    return content if isinstance(content, str) else ""


def token_usage(response: Any) -> tuple[int, int]:
    usage = field(response, "usage")
    return (
        int(field(usage, "prompt_tokens") or 0),
        int(field(usage, "completion_tokens") or 0),
    )


def read_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    """OpenAI-style ``choices[0].logprobs`` as :class:`TokenLogprob` s (None when absent)."""
    content = field(logprobs, "content")
    if not content:
        return None
    tokens = []
    for item in content:
        token, logprob = field(item, "token"), field(item, "logprob")
        if not isinstance(token, str) or not isinstance(logprob, (int, float)):
            continue
        top = tuple(
            (str(field(alt, "token")), float(field(alt, "logprob")))
            for alt in field(item, "top_logprobs") or ()
            if isinstance(field(alt, "logprob"), (int, float))
        )
        tokens.append(TokenLogprob(token, float(logprob), top))
    return tuple(tokens) or None
