"""Public pydantic models that fail like the rest of the package: with a :class:`ConfigError`.

pydantic raises its own ``ValidationError`` (a ``ValueError``, not a ``SpanjudgeError``) from a
model's constructor. :class:`CheckedModel` turns it into a ``ConfigError`` whose message has one
``key: what is wrong`` line per error (:func:`error_lines`), so ``except SpanjudgeError`` catches a
bad ``LLMTestCase(...)`` or ``MonitorConfig(...)`` as it catches a bad ``Rule(...)``.

Example::

    class Point(CheckedModel):
        x: int

    Point(x="a")  # ConfigError: Point.x: Input should be a valid integer...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from spanjudge.errors import ConfigError


def message_of(err: ErrorDetails) -> str:
    """What is wrong, as one pydantic error says it; a validator's own ``ValueError`` gives its
    text without pydantic's ``Value error, `` prefix."""
    if err["type"] == "value_error":
        return err["msg"].removeprefix("Value error, ")
    return err["msg"]


def error_lines(exc: ValidationError, prefix: str = "") -> list[str]:
    """One ``key: what is wrong (got value)`` line per error of ``exc``; ``prefix`` goes before
    each key. The worker's settings and every :class:`CheckedModel` report with it."""
    lines = []
    for err in exc.errors():
        key = prefix + (".".join(str(p) for p in err["loc"]) or "(top level)")
        if err["type"] == "extra_forbidden":
            lines.append(f"{key}: unknown key")
            continue
        got = err.get("input")
        # numbers and flags are shown; text never is: a value in the wrong key may be a secret
        # (an API key pasted into `mode`), and a long one would flood the line
        shown = f" (got {got!r})" if isinstance(got, (int, float, bool)) or got is None else ""
        lines.append(f"{key}: {message_of(err)}{shown}")
    return lines


class CheckedModel(BaseModel):
    """A pydantic model whose constructor raises :class:`ConfigError` on bad input."""

    if not TYPE_CHECKING:  # type checkers keep the keyword signature pydantic derives

        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as exc:
                prefix = f"{type(self).__name__}."
                raise ConfigError("; ".join(error_lines(exc, prefix))) from None
