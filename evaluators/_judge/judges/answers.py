"""Reading a judge's answer: its verdict, validated against the schema asked for, and the
prompt's instruction asking for that JSON.

What is read as the verdict, in order:

1. the whole answer as one JSON object: what a structured-output response (``json_schema``,
   ``json_object``, a forced tool call's arguments) is, and what a judge told "JSON only" writes;
2. else the **last** top-level JSON object in the answer, after every ``<quoted-data>`` block
   the judge quoted back is left out (see :mod:`~spanjudge.evaluators._judge.quoting`):
   fenced or not, with chat around it, trailing commas and raw newlines in strings forgiven.

Only that one object is validated: an earlier object (JSON the judged answer carried and the
judge quoted, ``{"claims": []}``) is never taken instead, and a last object that does not match
the schema is a problem for the repair-or-retry, not a reason to look further back. A number
that is not finite (``NaN``, ``Infinity``, ``1e999``) anywhere in it makes the verdict invalid
like any schema mismatch::

    parse_answer('Sure: ```json\n{"reason": "ok"}\n```', Reason)  # Reason(reason='ok')
    parse_answer('It says {"reason": "quoted"}. Mine: {"reason": "mine"}', Reason).reason  # mine
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from spanjudge.evaluators._judge.quoting import outside_blocks

T = TypeVar("T", bound=BaseModel)

_TRAILING_COMMA = re.compile(r",\s*([}\]])")
# strict=False: raw newlines inside strings, which llama.cpp's JSON grammar lets small models
# write, are read as the newlines they mean
_DECODER = json.JSONDecoder(strict=False)


_MAX_FAILED_STARTS = 256
"""Braces that open no JSON object tried before the search gives up: a chatty answer has a
handful; an answer of nothing but nested, unclosed objects would otherwise cost a parse
attempt per brace, each reading far into the text."""


def top_level_objects(text: str) -> list[Any]:
    """The JSON objects in ``text`` that no other JSON object holds, in order."""
    found: list[Any] = []
    failed = 0
    at = text.find("{")
    while at >= 0 and failed < _MAX_FAILED_STARTS:
        try:
            value, end = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):  # not JSON there, or nested deeper than Python reads
            failed += 1
            at = text.find("{", at + 1)
            continue
        found.append(value)
        at = text.find("{", end)
    return found


def extract_json(text: str) -> Any:
    """The verdict object of a chatty answer: the last top-level JSON object outside quoted
    blocks (trailing commas forgiven)."""
    # the commas go first, everywhere: an object skipped for its trailing comma would let an
    # earlier (quoted) object pass for the last one
    found = top_level_objects(_TRAILING_COMMA.sub(r"\1", outside_blocks(text)))
    if not found:
        raise ValueError("no JSON object found in the answer")
    return found[-1]


def _non_finite(value: Any) -> float | None:
    """The first number in ``value`` (a JSON-like tree) that is not finite, else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _non_finite(item)
            if found is not None:
                return found
    return None


def parse_answer(text: str, schema: type[T]) -> T:
    """Validate ``text`` against ``schema``; raises ValueError with a short explanation."""
    answer = _validate(text, schema)
    bad = _non_finite(answer.model_dump())
    if bad is not None:
        # JSON has no NaN or Infinity; Python's and pydantic's parsers accept them all the same
        raise ValueError(f"the answer holds {bad!r}, which is not a finite number")
    return answer


def _validate(text: str, schema: type[T]) -> T:
    try:
        # the usual answer, a bare JSON object, parsed and validated in one step
        return schema.model_validate_json(text)
    except ValidationError:
        pass  # fenced, chatty, trailing commas, raw newlines, or not the schema: read it below
    data = extract_json(text)
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
