"""How a judge asks an OpenAI-compatible endpoint for JSON, and what it learns about each one.

Servers differ in the structured-output forms they take. OpenAI and vLLM take
``response_format: {"type": "json_schema", ...}``; llama.cpp's servers refuse that with a 400 and
take ``{"type": "json_object", "schema": {...}}`` (constrained decoding); others only take tool
calling, or nothing. The forms, best first:

* ``json_schema``: ``response_format`` with the schema (OpenAI, vLLM, Ollama, LM Studio...);
* ``json_object``: JSON mode with the schema beside it (llama.cpp ``llama-server``,
  ``llama-cpp-python``; servers that ignore the schema still answer JSON);
* ``tools``: one forced tool call whose parameters are the schema;
* ``prompt``: no request field; the prompt asks for JSON and the answer is extracted and repaired.

A refusal of a form (HTTP 400/422 naming it, a 500 quoting a request-validation error about it
as llama-cpp-python sends, or litellm's "unsupported parameter") moves to the next form at once;
the form that works is remembered per (endpoint, model) for the process.
Every form also keeps the prompt's JSON instruction, so a server that silently ignores the field
still gets a parseable answer.

Example::

    ladder = Negotiator()
    key = ("http://127.0.0.1:8080/v1", "openai/smollm2")
    form = ladder.state(key, start=lambda: "json_schema").form
    request.update(request_fields(form, Verdicts))
    form = ladder.step_down(key, form)   # after a 400 naming response_format: "json_object"
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel

from spanjudge.errors import ConfigError

Form = Literal["json_schema", "json_object", "tools", "prompt"]
FORMS: tuple[Form, ...] = get_args(Form)
# the setting (judge_structured_output, structured_output=): negotiate, or pin one form
StructuredOutput = Literal["auto", Form]
STRUCTURED_OUTPUT_CHOICES: tuple[StructuredOutput, ...] = get_args(StructuredOutput)

# What a refusal of each form names in the server's error text (lower case).
_NAMES: dict[str, tuple[str, ...]] = {
    "json_schema": ("response_format", "json_schema", "response format", "schema"),
    "json_object": ("response_format", "json_object", "response format", "json mode", "schema"),
    "tools": ("tool", "function"),
    "prompt": (),
}
_UNSUPPORTED = ("unsupported", "not supported", "does not support", "not support")
_VALIDATION = ("validation error", "input should be", "literal_error")


def pick_form(structured_output: str | bool | None) -> str:
    """The setting's form: ``auto`` (negotiate) or one pinned form; bools as before."""
    if structured_output is None:
        return "auto"
    if structured_output is True:
        return "json_schema"
    if structured_output is False:
        return "prompt"
    value = str(structured_output).strip().lower()
    if value not in STRUCTURED_OUTPUT_CHOICES:
        raise ConfigError(
            f"structured_output must be one of {', '.join(STRUCTURED_OUTPUT_CHOICES)}, "
            f"got {structured_output!r}"
        )
    return value


@functools.lru_cache(maxsize=2048)
def request_fields(form: str, schema: type[BaseModel]) -> dict[str, Any]:
    """The request fields that ask for ``schema`` in ``form``, built once per (form, schema):
    the JSON schema costs pydantic a millisecond to generate. Shared: copy before changing."""
    if form == "prompt":
        return {}
    body = schema.model_json_schema()
    if form == "json_schema":
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": body, "strict": False},
            }
        }
    if form == "json_object":
        return {"response_format": {"type": "json_object", "schema": body}}
    if form == "tools":
        name = schema.__name__
        return {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": f"Record the answer as a {name} object.",
                        "parameters": body,
                    },
                }
            ],
            "tool_choice": {"type": "function", "function": {"name": name}},
        }
    raise ConfigError(f"unknown structured-output form {form!r}")


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def refuses(exc: BaseException, form: str) -> bool:
    """Whether ``exc`` is the server (or litellm) turning down ``form`` itself, not the call."""
    if form == "prompt":
        return False
    text = str(exc).lower()
    if type(exc).__name__ == "UnsupportedParamsError":
        return True
    status = _status(exc)
    names = any(name in text for name in _NAMES[form])
    if status == 500:
        # llama-cpp-python answers a request-validation failure with a 500 that quotes it
        return names and any(v in text for v in _VALIDATION)
    if status not in (400, 422):
        return False
    return names or any(u in text for u in _UNSUPPORTED)


def refuses_logprobs(exc: BaseException) -> bool:
    """Whether ``exc`` turns down the ``logprobs``/``top_logprobs`` request fields."""
    if type(exc).__name__ != "UnsupportedParamsError" and _status(exc) not in (400, 422):
        return False
    return "logprob" in str(exc).lower()


@dataclass
class Learnt:
    """What one (endpoint, model) turned out to take."""

    form: str
    logprobs: bool = True


class Negotiator:
    """The structured-output form and logprobs support learnt per (endpoint, model); shared by
    every judge in the process, safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._learnt: dict[tuple[str, str], Learnt] = {}

    def state(self, key: tuple[str, str], *, start: Callable[[], str]) -> Learnt:
        """A copy of what ``key`` is known to take; ``start()`` gives the first form of a key
        not seen yet (called outside the lock: it may consult litellm's model table)."""
        with self._lock:
            learnt = self._learnt.get(key)
            if learnt is not None:
                return Learnt(learnt.form, learnt.logprobs)
        first = start()
        with self._lock:
            learnt = self._learnt.setdefault(key, Learnt(first))
            return Learnt(learnt.form, learnt.logprobs)

    def step_down(self, key: tuple[str, str], refused: str) -> str:
        """Record that ``refused`` was turned down; returns the next form to try."""
        nxt = FORMS[min(FORMS.index(refused) + 1, len(FORMS) - 1)]
        with self._lock:
            learnt = self._learnt.setdefault(key, Learnt(nxt))
            # another call may already have stepped further down: never step back up
            if FORMS.index(learnt.form) <= FORMS.index(nxt):
                learnt.form = nxt
            return learnt.form

    def no_logprobs(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._learnt.setdefault(key, Learnt(FORMS[0])).logprobs = False

    def forget(self) -> None:
        with self._lock:
            self._learnt.clear()


NEGOTIATOR = Negotiator()
"""The process-wide memory of what each endpoint takes."""
