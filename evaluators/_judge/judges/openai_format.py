"""Reading an OpenAI-style chat completion, whether litellm's response objects or the plain JSON
the direct path receives: the answer text (a forced tool call's arguments, else the content),
finish reason, token usage and token log-probabilities.

Example::

    text = answer_text(message(body))
    tokens_in, tokens_out = token_usage(body)
"""

from __future__ import annotations

import json
import math
from typing import Any

from spanjudge.errors import JudgeResponseError
from spanjudge.evaluators._judge.judges.base import TokenLogprob

_LOGPROB_NOISE = 1e-6


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


def _logprob(token: Any, value: Any) -> float:
    """``value`` as a log-probability: a finite number <= 0 (a hair above 0 is float noise);
    anything else is an invalid answer, never a NaN score downstream."""
    number = float(value)
    if not math.isfinite(number) or number > _LOGPROB_NOISE:
        raise JudgeResponseError(
            f"the judge gave token {str(token)[:40]!r} the log-probability {value!r}: "
            "a log-probability is a finite number at most 0"
        )
    return number


def read_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    """OpenAI-style ``choices[0].logprobs`` as :class:`TokenLogprob` s (None when absent);
    :class:`JudgeResponseError` for a log-probability that is not finite or above 0."""
    content = field(logprobs, "content")
    if not content:
        return None
    tokens = []
    for item in content:
        token, logprob = field(item, "token"), field(item, "logprob")
        if not isinstance(token, str) or not isinstance(logprob, (int, float)):
            continue
        top = tuple(
            (str(field(alt, "token")), _logprob(field(alt, "token"), field(alt, "logprob")))
            for alt in field(item, "top_logprobs") or ()
            if isinstance(field(alt, "logprob"), (int, float))
        )
        tokens.append(TokenLogprob(token, _logprob(token, logprob), top))
    return tuple(tokens) or None
