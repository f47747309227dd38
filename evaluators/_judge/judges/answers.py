"""Reading a judge's answer: the JSON in it, validated against the schema asked for, and the
prompt's instruction asking for that JSON.

::

    parse_answer('Sure: ```json\n{"reason": "ok"}\n```', Reason)  # Reason(reason='ok')
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def extract_json(text: str) -> Any:
    """The JSON value in a chatty answer: plain, inside a code fence, or with text around it."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        for variant in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
            try:
                # strict=False: raw newlines inside strings, which llama.cpp's JSON grammar lets
                # small models write, are read as the newlines they mean
                return json.loads(variant, strict=False)
            except (json.JSONDecodeError, ValueError):
                continue
    raise ValueError("no JSON object found in the answer")


def parse_answer(text: str, schema: type[T]) -> T:
    """Validate ``text`` against ``schema``; raises ValueError with a short explanation."""
    try:
        # the usual answer, a bare JSON object, parsed and validated in one step
        return schema.model_validate_json(text)
    except ValidationError:
        pass  # fenced, chatty, trailing commas, raw newlines, or not the schema: read it below
    try:
        data = extract_json(text)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        raise ValueError(
            f"the JSON does not match the schema {schema.__name__}: {problems}"
        ) from None


@functools.lru_cache(maxsize=1024)
def json_instruction(schema: type[BaseModel]) -> str:
    """The prompt's JSON instruction for ``schema`` (built once per schema class)."""
    fields = ", ".join(schema.model_json_schema().get("properties", {}))
    return (
        f"\n\nReply with a single JSON object for the schema {schema.__name__} "
        f"(keys: {fields}) and nothing else."
    )
