"""Tool Correctness against expected tools: deepeval's deterministic formula, no judge call.

Three ways to compare the tools called with the tools expected, as deepeval documents them:

* default: each expected tool matched with one call of the same name (best match first, each
  call used once); score = matched / expected;
* ``should_consider_ordering``: the longest common subsequence of expected and called tools
  (weighted by argument matches); score = its weight / expected;
* ``should_exact_match``: the same tools in the same order, as many as expected: 1 or 0.

``evaluation_params`` adds ``"input_parameters"`` (arguments must match: a partial match of
keys counts as a share, except with exact matching) and/or ``"output"`` (results must be equal).
Nothing expected and nothing called scores 1; nothing expected but calls made scores 0::

    score_expected([ToolCall(name="a")], [ToolCall(name="a"), ToolCall(name="b")], ...)  # 0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.test_case import ToolCall

__all__ = ["EVALUATION_PARAMS", "describe_expected", "evaluation_params", "score_expected"]

EVALUATION_PARAMS = ("input_parameters", "output")
"""What ``evaluation_params`` may hold besides the tool name."""


def evaluation_params(params: Sequence[Any]) -> tuple[str, ...]:
    """deepeval's ``ToolCallParams`` members or their string values, checked; the error names
    the parameter."""
    found = []
    for param in params or ():
        value = str(getattr(param, "value", param))
        if value not in EVALUATION_PARAMS:
            raise ConfigError(
                f"evaluation_params: unknown value {value!r} (allowed: "
                f"{', '.join(EVALUATION_PARAMS)})"
            )
        found.append(value)
    return tuple(dict.fromkeys(found))


def score_expected(
    called: Sequence[ToolCall],
    expected: Sequence[ToolCall],
    params: tuple[str, ...],
    *,
    exact: bool = False,
    ordered: bool = False,
) -> float:
    """The score of ``called`` against ``expected`` (see the module docstring)."""
    if exact:
        return _exact(called, expected, params)
    if not expected:
        return 1.0 if not called else 0.0
    if ordered:
        return _lcs_weight(called, expected, params, exact) / len(expected)
    return _unordered(called, expected, params, exact) / len(expected)


def describe_expected(
    called: Sequence[ToolCall], expected: Sequence[ToolCall], score: float, ordered: bool
) -> str:
    """One sentence on what matched, for the reason."""
    want = [t.name for t in expected]
    got = [t.name for t in called]
    if score >= 1.0:
        how = "in order" if ordered else "order not considered"
        return f"Every expected tool was called ({how}): expected {want}, called {got}."
    missing = [name for name in dict.fromkeys(want) if name not in got]
    extra = [name for name in dict.fromkeys(got) if name not in want]
    issues = []
    if missing:
        issues.append(f"not called: {missing}")
    if extra:
        issues.append(f"not expected: {extra}")
    if not issues:
        issues.append("wrong order or arguments")
    return (
        f"Expected tools matched {score:.2f} ({'; '.join(issues)}): expected {want}, called {got}."
    )


def _match(one: ToolCall, other: ToolCall, params: tuple[str, ...], exact: bool) -> float:
    if one.name != other.name:
        return 0.0
    score = 1.0
    if "input_parameters" in params:
        score *= _compare(one.input_parameters or {}, other.input_parameters or {}, exact)
    if "output" in params and one.output != other.output:
        score = 0.0
    return score


def _exact(
    called: Sequence[ToolCall], expected: Sequence[ToolCall], params: tuple[str, ...]
) -> float:
    if len(called) != len(expected):
        return 0.0
    return float(
        all(_match(e, c, params, True) == 1.0 for e, c in zip(expected, called, strict=True))
    )


def _unordered(
    called: Sequence[ToolCall], expected: Sequence[ToolCall], params: tuple[str, ...], exact: bool
) -> float:
    used: set[int] = set()
    total = 0.0
    for want in expected:
        best, best_at = 0.0, -1
        for at, call in enumerate(called):
            if at in used:
                continue
            score = _match(want, call, params, exact)
            if score > best:
                best, best_at = score, at
        if best > 0:
            total += best
            used.add(best_at)
    return total


def _lcs_weight(
    called: Sequence[ToolCall], expected: Sequence[ToolCall], params: tuple[str, ...], exact: bool
) -> float:
    # weighted longest common subsequence: table[i][j] is the best weight of expected[:i]
    # against called[:j]
    rows, cols = len(expected), len(called)
    table = [[0.0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            best = max(table[i - 1][j], table[i][j - 1])
            score = _match(expected[i - 1], called[j - 1], params, exact)
            if score > 0:
                best = max(best, table[i - 1][j - 1] + score)
            table[i][j] = best
    return table[rows][cols]


def _compare(one: dict[str, Any], other: dict[str, Any], exact: bool) -> float:
    if one == other:
        return 1.0
    if exact:
        return 0.0
    keys = set(one) | set(other)
    score = 0.0
    for key in set(one) & set(other):
        if one[key] == other[key]:
            score += 1 / len(keys)
        elif isinstance(one[key], dict) and isinstance(other[key], dict):
            score += _compare(one[key], other[key], exact) / len(keys)
    return score
