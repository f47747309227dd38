"""G-Eval's score: the judge's answer (an integer on 0..10, or 0..1 in strict mode, with its
reason) and the probability-weighted score from the log-probabilities of the score token::

    weighted_score(8, answer.logprobs)   # 7.8 when the judge weighed 8 at p=0.8 and 7 at p=0.2
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, create_model, field_validator

if TYPE_CHECKING:
    from spanjudge.evaluators._judge.judges.base import TokenLogprob

SCALE_TOP = 10
"""The top of G-Eval's scale (0..10); the metric reports score / SCALE_TOP."""

MIN_PROBABILITY = 0.01
"""Alternatives of the score token below this probability are left out of the weighted mean."""

DECIMALS = 6
"""The weighted score is rounded to this many decimals (on the 0..10 scale)."""

# ---------------------------------------------------------------------------- schema


class GEvalScore(BaseModel):
    """The judge's scoring answer: "reason" first, then "score", an integer from 0 to 10 (0 or 1
    in strict mode)."""

    # Anything else (11, -1, 7.5, "high", true) is invalid. The range is a validator, not schema
    # bounds, so strict mode's variant (GEvalBinaryScore) sends the same JSON schema.
    scale_top: ClassVar[int] = SCALE_TOP

    reason: str
    score: int

    @field_validator("score", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("the score must be an integer, not true/false")
        return value

    @field_validator("score")
    @classmethod
    def _on_the_scale(cls, value: int) -> int:
        if not 0 <= value <= cls.scale_top:
            raise ValueError(f"the score must be an integer from 0 to {cls.scale_top}, got {value}")
        return value


GEvalBinaryScore: type[GEvalScore] = create_model(
    "GEvalScore",  # same name: scripted judges and the JSON schema sent see one schema
    __base__=GEvalScore,
    __module__=__name__,
    __doc__=GEvalScore.__doc__,
)
""":class:`GEvalScore` of strict mode: 0 or 1."""
GEvalBinaryScore.scale_top = 1


# ---------------------------------------------------------------------------- score arithmetic

_SCORE_VALUE = re.compile(r'"score"\s*:\s*(\d+)')


def _score_position(raw: int, logprobs: Sequence[TokenLogprob]) -> TokenLogprob | None:
    """The token that wrote the score's value (found by its offset in the answer text)."""
    starts: list[int] = []
    text = ""
    for item in logprobs:
        starts.append(len(text))
        text += item.token
    matches = list(_SCORE_VALUE.finditer(text))
    if not matches:
        return None
    offset = matches[-1].start(1)
    for index in range(len(logprobs) - 1, -1, -1):
        if starts[index] <= offset:
            token = logprobs[index]
            return token if token.token.strip() == str(raw) else None
    return None


def weighted_score(
    raw: int, logprobs: Sequence[TokenLogprob] | None, top: int = SCALE_TOP
) -> float:
    """The probability-weighted score on 0..``top``, or ``raw`` when it cannot be weighted.

    At the position of the score token, each alternative that is an integer in 0..``top`` with
    probability >= :data:`MIN_PROBABILITY` counts with its probability; the result is the
    weighted mean over those (probabilities renormalised to sum to 1), rounded to
    :data:`DECIMALS` decimals. No log-probabilities, no score token among them, or no usable
    alternative: ``raw``. Example: alternatives 8 (p=0.8) and 7 (p=0.2) give
    0.8*8 + 0.2*7 = 7.8.
    """
    if not logprobs:
        return float(raw)
    position = _score_position(raw, logprobs)
    if position is None:
        return float(raw)
    total = weighted = 0.0
    for token, logprob in position.top:
        text = token.strip()
        if not (text.isascii() and text.isdecimal()) or int(text) > top:
            continue
        probability = math.exp(logprob)
        if probability < MIN_PROBABILITY:
            continue
        total += probability
        weighted += probability * int(text)
    if total <= 0:
        return float(raw)
    # rounded: float noise from exp(log p) must not put a score a hair under its threshold
    return round(weighted / total, DECIMALS)


def normalise(score: float, top: int = SCALE_TOP) -> float:
    """``score`` on 0..``top`` as 0..1, at the weighted score's precision (9.4 / 10 is
    0.9400000000000001 in floating point, which would fail a 0.94 threshold)."""
    return round(score / top, DECIMALS + 1)
