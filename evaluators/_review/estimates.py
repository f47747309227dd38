"""Pass rates and mean scores with their intervals, per rule x segment, from weighted samples.

Input: the sums of :class:`~spanjudge._store.summaries.SegmentSums` (the store adds
them up in SQL). Each result has a weight ``w = 1 / p``, ``p`` the probability its target was
sampled with (``EvaluationRecord.sample_rate``; unknown = 1). The methods (docs/numbers.md):

* **Pass rate**: the Hajek (ratio) estimator ``p = sum(w*y) / sum(w)`` (y = 1 pass, 0 fail).
  Its variance is the Taylor-linearised ``sum(w^2 (y - p)^2) / sum(w)^2`` (Sarndal, Swensson &
  Wretman 1992, 5.7); the interval is Wilson's score interval (Wilson 1927) with ``n`` replaced by
  the effective sample size ``n_eff = p (1 - p) / variance`` (Korn & Graubard 1998), **capped at
  Kish's** ``n_kish = (sum w)^2 / sum(w^2)`` (Kish 1965), the information the weights allow:
  with a risk-boosted subset at rate 1 beside verdicts at a low rate, the linearised variance of
  a small sample can be small by chance, and ``n_eff`` with it, far above what a few heavy
  verdicts tell. With equal weights it is exactly the textbook Wilson interval.
* **Mean score**: scores live in [0, 1], so their variance is at most ``m (1 - m)`` (Bhatia &
  Davis 2000): the interval is Wilson's score interval at the Hajek mean ``m`` with the same
  capped effective size, ``min(m (1 - m) / variance, n_kish)``. On pass/fail scores it is the
  pass-rate interval; on other scores it is wider than a t interval (it assumes the largest
  variance the mean allows), and a run of equal scores is never a zero-width interval: ten
  scores of 1.0 give ``[10 / (10 + z^2), 1]``, as ten passes do.

Assumptions: results are independent draws of their segment's targets; the sampling
probability of each is recorded and above zero (Poisson sampling); the large-sample normal
approximation behind Wilson's interval, which holds from a handful of verdicts when the
weights are equal, and from about 30 verdicts under the risk-boosted weights our sampler makes
(benchmarks/sampling.py, docs/numbers.md).

Example::

    rows = summarize(store.summary_sums(by="service.version", since=t), by="service.version")
    rows[0].pass_rate   # Estimate(value=0.9, low=0.77, high=0.96)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist

from spanjudge._store.summaries import ALL, SegmentSums
from spanjudge.errors import ConfigError
from spanjudge.evaluators._review.agreement import Estimate

__all__ = [
    "OTHER",
    "SegmentSummary",
    "effective_size",
    "fold_name",
    "fold_segments",
    "gamma_quantile",
    "mean_interval",
    "pass_rate",
    "score_interval",
    "summarize",
    "under_covered",
    "wilson_interval",
]

OTHER = "other"
"""The name of the row the segments beyond a cap are folded into (:func:`fold_name`)."""


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


# --- Wilson's interval, modified near the bounds (Brown, Cai & DasGupta 2001, 4.1.1)
def _gamma_lower(a: float, y: float) -> float:
    """The regularised lower incomplete gamma function ``P(a, y)``, by its power series."""
    if y <= 0:
        return 0.0
    term = total = 1.0 / a
    k = a
    for _ in range(10_000):
        k += 1
        term *= y / k
        total += term
        if term < total * 1e-17:
            break
    return min(1.0, total * math.exp(-y + a * math.log(y) - math.lgamma(a)))


def gamma_quantile(a: float, probability: float) -> float:
    """The ``probability`` quantile of the Gamma(``a``, 1) distribution (``a`` > 0), by
    bisection on :func:`_gamma_lower`; ``chi2.ppf(q, 2a) / 2``.

    Example::

        gamma_quantile(1.0, 0.025)   # 0.0253178... (an exponential's 2.5% quantile)
    """
    if not a > 0 or not 0 < probability < 1:
        raise ConfigError(f"need a > 0 and 0 < probability < 1, got {a}, {probability}")
    low, high = 0.0, a + 10 * math.sqrt(a) + 10
    for _ in range(200):
        mid = (low + high) / 2
        if _gamma_lower(a, mid) < probability:
            low = mid
        else:
            high = mid
        if high - low < 1e-15 * max(1.0, high):
            break
    return (low + high) / 2


def score_interval(p: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's interval for a share ``p`` of ``n`` (``n`` may be an effective size), with
    Brown, Cai & DasGupta's modification near the bounds: when ``x = p n`` (or ``n - x``) is
    positive and at most ``x*`` (2 for ``n`` <= 50, else 3), that bound is also taken no
    tighter than the Poisson one, ``Gamma(x, 1)``'s ``(1 - confidence) / 2`` quantile over ``n``.
    Wilson's own coverage dips to about 0.92 there (p = 0.99, n = 100); the modified interval
    keeps it at the level (their figure 5).

    Example::

        score_interval(0.97, 100)   # (0.9154..., 0.9938...): Wilson's upper bound is 0.9897
    """
    low, high = wilson_interval(p, n, confidence)
    if n <= 0:
        return low, high
    tail = (1 - confidence) / 2
    near = 2.0 if n <= 50 else 3.0
    x = p * n
    if 0 < x <= near:
        low = min(low, gamma_quantile(x, tail) / n)
    if 0 < n - x <= near:
        high = max(high, 1 - gamma_quantile(n - x, tail) / n)
    return max(0.0, low), min(1.0, high)


# --- the estimators
def effective_size(value: float, variance: float, kish: float, count: int) -> float:
    """The size a [0, 1] estimate's interval is as wide as: ``value (1 - value) / variance``
    (Korn & Graubard 1998), at most Kish's ``kish`` and the count itself; ``kish`` when the
    value sits on a bound or the variance is 0 (every observed value equal)."""
    spread = value * (1 - value)
    n_eff = spread / variance if spread > 0 and variance > 0 else kish
    return min(n_eff, kish, float(count))


def pass_rate(s: SegmentSums, confidence: float = 0.95) -> tuple[Estimate, float]:
    """The Hajek pass rate of ``s`` with its weighted Wilson interval, and its effective
    sample size (``Estimate(None)``, 0 without verdicts)."""
    if s.verdicts == 0 or s.pass_weight <= 0 or s.pass_weight2 <= 0:
        return Estimate(None), 0.0
    p = s.passed_weight / s.pass_weight
    kish = s.pass_weight**2 / s.pass_weight2
    variance = (s.passed_weight2 * (1 - 2 * p) + p * p * s.pass_weight2) / s.pass_weight**2
    n_eff = effective_size(p, variance, kish, s.verdicts)
    low, high = score_interval(p, n_eff, confidence)
    return Estimate(p, low, high), n_eff


def mean_interval(s: SegmentSums, confidence: float = 0.95) -> tuple[Estimate, float]:
    """The Hajek mean score of ``s`` with its interval for scores in [0, 1] (Wilson's at the
    mean, with the capped effective size), and the linearised variance of the mean (``inf``
    under two scores, when the mean has no interval)."""
    if s.scores == 0 or s.score_weight <= 0 or s.score_weight2 <= 0:
        return Estimate(None), math.inf
    mean = min(max(s.score_sum / s.score_weight, 0.0), 1.0)
    if s.scores < 2:
        return Estimate(mean), math.inf
    n = s.scores
    spread = s.score_sq_w2 - 2 * mean * s.score_sum_w2 + mean * mean * s.score_weight2
    variance = max(spread, 0.0) / s.score_weight**2 * n / (n - 1)
    kish = s.score_weight**2 / s.score_weight2
    low, high = score_interval(mean, effective_size(mean, variance, kish, n), confidence)
    return Estimate(mean, low, high), variance


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
    folded: int = 0  # segments folded into this one (the fold's row)
    target_half_width: float | None = None  # the rule's precision target, if it has one
    under_covered: bool = False  # a target the interval does not reach (or no interval)


def fold_name(segments: Iterable[str]) -> str:
    """The name of the fold's row: ``"other"``, or ``"(other)"`` (``"((other))"``...) when a
    real segment already has that name, so a real segment is never merged with the rest."""
    taken, name = set(segments), OTHER
    while name in taken:
        name = f"({name})"
    return name


def fold_segments(
    sums: Mapping[tuple[str, str, str], SegmentSums], cap: int
) -> tuple[dict[tuple[str, str, str], SegmentSums], dict[tuple[str, str, str], int]]:
    """Keep per (rule, metric) the ``cap`` segments with the most results and fold the rest
    into one row (:func:`fold_name`: ``"other"`` unless a real segment is called that).
    Returns new sums (``sums`` and its values are left as they were) and, per fold row's key,
    how many segments it holds."""
    grouped: dict[tuple[str, str], list[tuple[str, SegmentSums]]] = {}
    for (rule, metric, segment), s in sums.items():
        grouped.setdefault((rule, metric), []).append((segment, s))
    out: dict[tuple[str, str, str], SegmentSums] = {}
    folded: dict[tuple[str, str, str], int] = {}
    for (rule, metric), items in grouped.items():
        items.sort(key=lambda item: (-(item[1].scored + item[1].skipped + item[1].errors), item[0]))
        for segment, s in items[:cap]:
            out[(rule, metric, segment)] = s
        if len(items) > cap:
            rest = SegmentSums()
            for _segment, s in items[cap:]:
                rest.add(s)
            key = (rule, metric, fold_name(segment for segment, _s in items))
            out[key] = rest
            folded[key] = len(items) - cap
    return out, folded


def under_covered(rate: Estimate, target: float | None) -> bool:
    """Whether a pass rate misses its rule's half-width ``target`` (no interval: missed)."""
    if target is None:
        return False
    if rate.low is None or rate.high is None:
        return True
    return (rate.high - rate.low) / 2 > target


def summarize(
    sums: Mapping[tuple[str, str, str], SegmentSums],
    *,
    by: str | None = None,
    confidence: float = 0.95,
    folded: Mapping[tuple[str, str, str], int] | None = None,
    targets: Mapping[str, float] | None = None,
) -> list[SegmentSummary]:
    """One :class:`SegmentSummary` per (rule, metric, segment), sorted. ``targets``: rule
    name -> its ``target_half_width``; a row whose interval is wider is ``under_covered``."""
    rows = []
    for (rule, metric, segment), s in sorted(sums.items()):
        rate, n_eff = pass_rate(s, confidence)
        mean, _variance = mean_interval(s, confidence)
        target = (targets or {}).get(rule)
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
                folded=(folded or {}).get((rule, metric, segment), 0),
                target_half_width=target,
                under_covered=under_covered(rate, target),
            )
        )
    return rows
