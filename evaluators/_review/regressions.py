"""Did a segment (a new version) get worse than a baseline: an effect, its interval, a decision.

The effect is the candidate's estimate minus the baseline's (pass rate, mean score; negative is
worse), from :mod:`.estimates`. Its interval is a **confidence sequence**: it covers the true
difference at every moment at once with probability ``1 - alpha``, so the worker may look at it
every tick, forever, and the decision keeps its error rate; a fixed-sample interval checked
repeatedly does not (peeking inflates a 5% test to near certainty of a false alarm).

Method: the two-sided normal-mixture boundary of Robbins (1970) in the form of Howard, Ramdas,
McAuliffe & Sekhon (2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences",
Ann. Statist. 49(2)), applied with estimated variances as the asymptotic confidence sequences of
Waudby-Smith, Arnold, Wu, Wang & Ramdas (2024, "Time-uniform central limit theory and asymptotic
confidence sequences", Ann. Statist. 52(6)). With ``V`` the variance of the difference and
``I = 1 / V`` its information, ``S = I * difference`` is treated as Brownian motion in ``I``;
the mixture of its likelihood ratios over a ``N(0, 1 / rho)`` prior on the drift,

    e = sqrt(rho / (I + rho)) * exp(S^2 / (2 (I + rho))),

is an e-value (a nonnegative supermartingale under "no difference"): by Ville's inequality it
ever exceeds ``1 / alpha`` with probability at most ``alpha``. Inverting it gives the interval
``difference +- sqrt((I + rho) log((I + rho) / (rho alpha^2))) / I``. ``rho`` sets where the
boundary is tightest, fixed in advance: at ``I*``, the information of :data:`TUNED_VERDICTS`
verdicts per segment at a pass rate of one half, ``rho = I* / x`` where ``x`` solves
``x = c + log(1 + x)``, ``c = -2 log alpha`` (setting the boundary's derivative in ``rho`` to
zero at ``I*``; Howard et al. 2021, section 3.5, choose the mixture the same way).

Each side's variance is the larger of its plug-in (linearised) variance and its variance under
"no difference": ``p0 (1 - p0) / n_kish`` for the pass rate, ``p0`` the two rates pooled by their
Kish effective sizes (the variance of the pooled two-proportion score test), and for the mean
score the spread of both sides' scores about their pooled mean, pooled the same way (on pass/fail
scores the two agree). The plug-in variance alone is too small exactly when a small candidate
happens to sit at an extreme (39 passes of 39 against a baseline at 0.92): where the test is
about to reject "no difference", it is judged with the variance that hypothesis implies. Under
every other effect the interval is at least as wide as the plug-in confidence sequence, which is
valid for any true effect, so it keeps its coverage.

Minimum information: no decision before each side's **Kish effective size**
``(sum w)^2 / sum(w^2)`` reaches :data:`MIN_VERDICTS` (with equal weights, that many verdicts).
Under the weights our sampler makes (a risk-boosted subset at rate 1 beside verdicts at a low
rate) 20 verdicts may carry the information of three, and the boundary's normal approximation
is not yet earned; each side's variance is also taken at that capped size (:mod:`.estimates`).

Assumptions: within each segment, results are independent draws (weighted as in
:mod:`.estimates`) with a common mean while the comparison runs; the variances are estimated
consistently; validity is asymptotic (hence the minimum information per side before a
decision), and the null-variance floor is what makes it hold from a few tens of verdicts.
benchmarks/sampling.py checks the false alarms after every verdict under those weights, with a
baseline that keeps growing while the candidate arrives (docs/numbers.md).
Each rule x measure x pair of segments is its own test: across many rules, expect ``alpha`` false
alarms per test over its whole life, not per day.

Example::

    effect = compare_pass_rate(baseline_sums, candidate_sums, alpha=0.05)
    effect.decision   # "worse" | "better" | "no difference yet" | "too few"
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from spanjudge._store.summaries import SegmentSums
from spanjudge.errors import ConfigError
from spanjudge.evaluators._review.agreement import Estimate
from spanjudge.evaluators._review.estimates import mean_interval, pass_rate

__all__ = [
    "DECISIONS",
    "MIN_VERDICTS",
    "TUNED_VERDICTS",
    "Comparison",
    "Effect",
    "compare_mean_score",
    "compare_pass_rate",
    "compare_segments",
    "mixture_boundary",
    "mixture_e_value",
]

WORSE, BETTER, UNDECIDED, TOO_FEW = "worse", "better", "no difference yet", "too few"
DECISIONS = (WORSE, BETTER, UNDECIDED, TOO_FEW)
# the gauge's decision value per decision
DECISION_VALUE = {WORSE: -1.0, BETTER: 1.0, UNDECIDED: 0.0, TOO_FEW: 0.0}
MIN_VERDICTS = 20
"""Less Kish effective size per side and no decision is made: the boundary is asymptotic."""
TUNED_VERDICTS = 100
"""The boundary is tightest at the information of this many verdicts per side at p = 0.5."""
MIN_VARIANCE = 1e-9  # two segments with constant scores: a difference, but not infinite evidence


def _rho(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must be between 0 and 1, got {alpha}")
    information = 1 / (2 * 0.25 / TUNED_VERDICTS)
    c = x = -2 * math.log(alpha)
    for _ in range(60):  # a contraction: the slope of log(1 + x) is under 1
        x = c + math.log(1 + x)
    return information / x


def mixture_boundary(information: float, alpha: float, rho: float | None = None) -> float:
    """Half-width of the confidence sequence at ``information`` = 1 / variance."""
    rho = _rho(alpha) if rho is None else rho
    total = information + rho
    return math.sqrt(total * math.log(total / (rho * alpha * alpha))) / information


def mixture_e_value(
    difference: float, variance: float, alpha: float, rho: float | None = None
) -> float:
    """The normal-mixture e-value against "no difference" (capped near 1e300)."""
    rho = _rho(alpha) if rho is None else rho
    information = 1 / variance
    s = difference * information
    log_e = 0.5 * math.log(rho / (information + rho)) + s * s / (2 * (information + rho))
    return math.exp(min(log_e, 690.0))


@dataclass(frozen=True)
class Effect:
    """Candidate minus baseline on one measure, with its confidence sequence and decision."""

    measure: str  # pass_rate | mean_score
    baseline: Estimate
    candidate: Estimate
    difference: Estimate  # the effect and its anytime-valid interval
    e_value: float | None
    decision: str
    alpha: float
    variance: float | None = None  # of the difference, as the decision used it


def _decide(
    measure: str, base: Estimate, cand: Estimate, variances: tuple[float, float], enough: bool,
    alpha: float,
) -> Effect:  # fmt: skip
    if base.value is None or cand.value is None:
        return Effect(measure, base, cand, Estimate(None), None, TOO_FEW, alpha)
    difference = cand.value - base.value
    if not enough:  # the effect as it stands, without an interval or a decision
        return Effect(measure, base, cand, Estimate(difference), None, TOO_FEW, alpha)
    variance = max(sum(variances), MIN_VARIANCE)
    half = mixture_boundary(1 / variance, alpha)
    e_value = mixture_e_value(difference, variance, alpha)
    decision = UNDECIDED
    if e_value >= 1 / alpha:
        decision = WORSE if difference < 0 else BETTER
    interval = Estimate(difference, max(-1.0, difference - half), min(1.0, difference + half))
    return Effect(measure, base, cand, interval, e_value, decision, alpha, variance)


def _kish(weight: float, weight2: float) -> float:
    return weight * weight / weight2 if weight2 > 0 else 0.0


def _rate_variance(s: SegmentSums) -> tuple[Estimate, float]:
    rate, n_eff = pass_rate(s)
    if rate.value is None or n_eff <= 0:
        return rate, math.inf
    # shrunk towards one half for the variance only, so 20 of 20 is not certainty
    shrunk = (rate.value * n_eff + 1) / (n_eff + 2)
    return rate, shrunk * (1 - shrunk) / n_eff


def _pooled(values: tuple[float, float], sizes: tuple[float, float]) -> float:
    return (values[0] * sizes[0] + values[1] * sizes[1]) / (sizes[0] + sizes[1])


def compare_pass_rate(
    baseline: SegmentSums, candidate: SegmentSums, *, alpha: float = 0.05
) -> Effect:
    """The pass-rate effect of ``candidate`` against ``baseline``.

    Each side's variance is the larger of its own (plug-in) variance and the variance it has
    under "no difference": ``p0 (1 - p0) / n_kish``, ``p0`` the two pass rates pooled by their
    effective sizes. At a few tens of verdicts a run of passes makes the plug-in variance far
    too small (and the test far too eager); the null variance does not shrink with it."""
    base, base_var = _rate_variance(baseline)
    cand, cand_var = _rate_variance(candidate)
    sizes = (
        _kish(baseline.pass_weight, baseline.pass_weight2),
        _kish(candidate.pass_weight, candidate.pass_weight2),
    )
    enough = min(sizes) >= MIN_VERDICTS * (1 - 1e-9)  # float sums of equal weights
    if enough and base.value is not None and cand.value is not None:
        p0 = _pooled((base.value, cand.value), sizes)
        base_var = max(base_var, p0 * (1 - p0) / sizes[0])
        cand_var = max(cand_var, p0 * (1 - p0) / sizes[1])
    return _decide("pass_rate", base, cand, (base_var, cand_var), enough, alpha)


def _spread_about(s: SegmentSums, centre: float) -> float:
    """The weighted variance of ``s``'s scores about ``centre`` (weights ``w^2``, as the
    linearised variance weighs them)."""
    spread = s.score_sq_w2 - 2 * centre * s.score_sum_w2 + centre * centre * s.score_weight2
    return max(spread, 0.0) / s.score_weight2


def compare_mean_score(
    baseline: SegmentSums, candidate: SegmentSums, *, alpha: float = 0.05
) -> Effect:
    """The mean-score effect of ``candidate`` against ``baseline``.

    As for the pass rate, each side's variance is at least its variance under "no
    difference": the score spread of both sides about their pooled mean ``m0``, pooled by
    effective sizes, over the side's ``n_kish``."""
    base, base_var = mean_interval(baseline)
    cand, cand_var = mean_interval(candidate)
    sizes = (
        _kish(baseline.score_weight, baseline.score_weight2),
        _kish(candidate.score_weight, candidate.score_weight2),
    )
    enough = min(sizes) >= MIN_VERDICTS * (1 - 1e-9)  # float sums of equal weights
    if enough and base.value is not None and cand.value is not None:
        m0 = _pooled((base.value, cand.value), sizes)
        spread0 = _pooled((_spread_about(baseline, m0), _spread_about(candidate, m0)), sizes)
        base_var = max(base_var, spread0 / sizes[0])
        cand_var = max(cand_var, spread0 / sizes[1])
    return _decide("mean_score", base, cand, (base_var, cand_var), enough, alpha)


@dataclass(frozen=True)
class Comparison:
    """One rule's comparison of two segments of a key."""

    rule: str
    metric: str
    key: str
    baseline: str
    candidate: str
    pass_rate: Effect
    mean_score: Effect

    @property
    def worse(self) -> bool:
        return WORSE in (self.pass_rate.decision, self.mean_score.decision)


def compare_segments(
    sums: Mapping[tuple[str, str, str], SegmentSums],
    *,
    key: str,
    baseline: str,
    candidate: str,
    alpha: float = 0.05,
) -> list[Comparison]:
    """Per (rule, metric) holding either segment, the comparison of ``candidate`` against
    ``baseline`` (``sums`` as ``store.summary_sums(by=key)`` returns them)."""
    pairs = sorted({(rule, metric) for rule, metric, _segment in sums})
    out = []
    for rule, metric in pairs:
        base = sums.get((rule, metric, baseline), SegmentSums())
        cand = sums.get((rule, metric, candidate), SegmentSums())
        if base.scored + base.errors + base.skipped + cand.scored + cand.errors + cand.skipped == 0:
            continue
        out.append(
            Comparison(
                rule, metric, key, baseline, candidate,
                compare_pass_rate(base, cand, alpha=alpha),
                compare_mean_score(base, cand, alpha=alpha),
            )
        )  # fmt: skip
    return out
