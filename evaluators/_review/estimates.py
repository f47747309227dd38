"""Pass rates and mean scores with their intervals, per rule x segment, from weighted samples.

Input: the sums of :class:`~spanjudge._store.summaries.SegmentSums` (the store adds
them up in SQL). Each result has a weight ``w = 1 / p``, ``p`` the probability its target was
sampled with (``EvaluationRecord.sample_rate``; unknown = 1). The methods (docs/numbers.md):

* **Pass rate**: the Hajek (ratio) estimator ``p = sum(w*y) / sum(w)`` (y = 1 pass, 0 fail).
  Its variance is the Taylor-linearised ``sum(w^2 (y - p)^2) / sum(w)^2`` (Sarndal, Swensson &
  Wretman 1992, 5.7); the interval is Wilson's score interval (Wilson 1927) with ``n`` replaced by
  the effective sample size ``n_eff = p (1 - p) / variance`` (Korn & Graubard 1998), capped at
  the number of verdicts, Kish's ``(sum w)^2 / sum(w^2)`` when p is 0 or 1. With equal weights
  it is exactly the textbook Wilson interval.
* **Mean score**: the Hajek mean with the same linearised variance times ``n / (n - 1)`` and a
  Student t interval on ``n_kish - 1`` degrees of freedom; with equal weights exactly the
  textbook t interval. Clipped to [0, 1], where scores live.

Assumptions: results are independent draws of their segment's targets; the sampling
probability of each is recorded and above zero (Poisson sampling); the large-sample normal
approximation behind both intervals (Wilson's holds well from a handful of verdicts, the t
interval's needs a few tens for skewed scores).

Example::

    rows = summarize(store.summary_sums(by="service.version", since=t), by="service.version")
    rows[0].pass_rate   # Estimate(value=0.9, low=0.77, high=0.96)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from spanjudge._store.summaries import ALL, SegmentSums
from spanjudge.errors import ConfigError
from spanjudge.evaluators._review.agreement import Estimate

__all__ = [
    "OTHER",
    "Estimate",
    "SegmentSummary",
    "fold_segments",
    "mean_interval",
    "pass_rate",
    "student_t_quantile",
    "summarize",
    "wilson_interval",
]

OTHER = "other"
"""The segment the ones beyond a cap are folded into."""


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(p: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a share ``p`` of ``n`` (``n`` may be an effective, non-whole
    size). With whole counts it equals :func:`~.agreement.wilson`.

    Example::

        wilson_interval(0.9, 40)   # (0.7694..., 0.9604...)
    """
    z = _z(confidence)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / denominator
    return (0.0 if p <= 0 else max(0.0, centre - half), 1.0 if p >= 1 else min(1.0, centre + half))


# --- Student t quantile: the regularised incomplete beta by its continued fraction (Lentz)
def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def _t_upper_tail(t: float, df: float) -> float:
    return 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))


@lru_cache(maxsize=4096)
def student_t_quantile(probability: float, df: float) -> float:
    """The ``probability`` quantile (above 0.5) of Student's t with ``df`` degrees of freedom
    (``df`` need not be whole), by bisection on the exact upper tail.

    Example::

        student_t_quantile(0.975, 9)   # 2.2621571...
    """
    if not 0.5 <= probability < 1 or df <= 0:
        raise ConfigError(f"need 0.5 <= probability < 1 and df > 0, got {probability}, {df}")
    tail = 1 - probability
    low, high = 0.0, 1.0
    while _t_upper_tail(high, df) > tail:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if _t_upper_tail(mid, df) > tail:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


# --- the estimators
def pass_rate(s: SegmentSums, confidence: float = 0.95) -> tuple[Estimate, float]:
    """The Hajek pass rate of ``s`` with its weighted Wilson interval, and its effective
    sample size (``Estimate(None)``, 0 without verdicts)."""
    if s.verdicts == 0 or s.pass_weight <= 0:
        return Estimate(None), 0.0
    p = s.passed_weight / s.pass_weight
    kish = s.pass_weight**2 / s.pass_weight2
    variance = (s.passed_weight2 * (1 - 2 * p) + p * p * s.pass_weight2) / s.pass_weight**2
    n_eff = p * (1 - p) / variance if 0 < p < 1 and variance > 0 else kish
    n_eff = min(n_eff, float(s.verdicts))
    low, high = wilson_interval(p, n_eff, confidence)
    return Estimate(p, low, high), n_eff


def mean_interval(s: SegmentSums, confidence: float = 0.95) -> tuple[Estimate, float]:
    """The Hajek mean score of ``s`` with its t interval (linearised variance, Kish degrees of
    freedom), and the variance of the mean (None interval under two scores)."""
    if s.scores == 0 or s.score_weight <= 0:
        return Estimate(None), math.inf
    mean = s.score_sum / s.score_weight
    if s.scores < 2:
        return Estimate(mean), math.inf
    n = s.scores
    spread = s.score_sq_w2 - 2 * mean * s.score_sum_w2 + mean * mean * s.score_weight2
    variance = max(spread, 0.0) / s.score_weight**2 * n / (n - 1)
    df = max(s.score_weight**2 / s.score_weight2 - 1, 1.0)
    half = student_t_quantile(0.5 + confidence / 2, df) * math.sqrt(variance)
    return Estimate(mean, max(0.0, mean - half), min(1.0, mean + half)), variance


@dataclass(frozen=True)
class SegmentSummary:
    """One rule x segment over a window: counts, pass rate and mean score with intervals."""

    rule: str
    metric: str
    key: str | None  # the segment key (None: not split)
    segment: str
    scored: int
    skipped: int
    errors: int
    verdicts: int
    effective_n: float  # of the pass rate: what its interval is as wide as
    pass_rate: Estimate
    mean_score: Estimate
    confidence: float
    folded: int = 0  # segments folded into this one ("other")


def fold_segments(
    sums: Mapping[tuple[str, str, str], SegmentSums], cap: int
) -> tuple[dict[tuple[str, str, str], SegmentSums], dict[tuple[str, str], int]]:
    """Keep per (rule, metric) the ``cap`` segments with the most results and fold the rest
    into ``"other"``; returns the sums and how many segments each (rule, metric) folded."""
    grouped: dict[tuple[str, str], list[tuple[str, SegmentSums]]] = {}
    for (rule, metric, segment), s in sums.items():
        grouped.setdefault((rule, metric), []).append((segment, s))
    out: dict[tuple[str, str, str], SegmentSums] = {}
    folded: dict[tuple[str, str], int] = {}
    for (rule, metric), items in grouped.items():
        items.sort(key=lambda item: (-(item[1].scored + item[1].skipped + item[1].errors), item[0]))
        for segment, s in items[:cap]:
            out[(rule, metric, segment)] = s
        if len(items) > cap:
            other = out.setdefault((rule, metric, OTHER), SegmentSums())
            for _segment, s in items[cap:]:
                other.add(s)
            folded[(rule, metric)] = len(items) - cap
    return out, folded


def summarize(
    sums: Mapping[tuple[str, str, str], SegmentSums],
    *,
    by: str | None = None,
    confidence: float = 0.95,
    folded: Mapping[tuple[str, str], int] | None = None,
) -> list[SegmentSummary]:
    """One :class:`SegmentSummary` per (rule, metric, segment), sorted."""
    rows = []
    for (rule, metric, segment), s in sorted(sums.items()):
        rate, n_eff = pass_rate(s, confidence)
        mean, _variance = mean_interval(s, confidence)
        rows.append(
            SegmentSummary(
                rule=rule,
                metric=metric,
                key=by,
                segment=segment if by is not None else ALL,
                scored=s.scored,
                skipped=s.skipped,
                errors=s.errors,
                verdicts=s.verdicts,
                effective_n=n_eff,
                pass_rate=rate,
                mean_score=mean,
                confidence=confidence,
                folded=(folded or {}).get((rule, metric), 0) if segment == OTHER else 0,
            )
        )
    return rows
