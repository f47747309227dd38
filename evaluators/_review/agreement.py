"""How often the judge agrees with a person: per rule and metric, from labelled results.

Each pair is one judge verdict and one human label on the same target (see
:meth:`~spanjudge._store.base.FeedbackLog.labelled_results`). A *fail* is the positive
class: the judge is there to catch failing answers. Per (rule, metric):

* ``accuracy``: share of pairs where judge and person agree;
* ``true_positive_rate``: of the answers the person failed, the share the judge failed too
  (failing answers caught);
* ``true_negative_rate``: of the answers the person passed, the share the judge passed;
* ``kappa``: Cohen's kappa, agreement beyond what the two label rates give by chance,
  ``(p_o - p_e) / (1 - p_e)``; undefined (None) when ``p_e == 1`` (both always said the same).

Confidence intervals (95% by default) use the standard library's ``statistics.NormalDist`` for
the normal quantile: Wilson score intervals for the three rates, and for kappa the large-sample
standard error of Fleiss, Cohen and Everitt (1969), the one ``statsmodels``' ``cohens_kappa``
reports, with the interval clipped to [-1, 1]. A rate with no pairs in its denominator is None,
never 0. (statsmodels itself, with numpy, scipy, pandas and formulaic, is some 375 MB installed:
too much to carry for two formulas; tests/feedback checks ours against values worked by hand.)

Example::

    rows = agreement(store.labelled_results(since=time.time() - 30 * 86400))
    for row in rows:
        print(row.rule, row.metric, row.labels, row.kappa.value)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge.errors import ConfigError

__all__ = [
    "STATS",
    "Agreement",
    "Estimate",
    "agreement",
    "cohen_kappa",
    "gauge_rows",
    "wilson",
]

FAIL = "fail"
# The gauge's ``stat`` label values, in table order (labels is the count of pairs).
STATS = ("labels", "accuracy", "true_positive_rate", "true_negative_rate", "kappa")


@dataclass(frozen=True)
class Estimate:
    """A statistic with its confidence interval; all None when it is undefined."""

    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Agreement:
    """Judge-versus-person counts and statistics for one (rule, metric)."""

    rule: str
    metric: str
    labels: int  # pairs
    both_fail: int  # true positives: the person and the judge failed it
    both_pass: int  # true negatives
    judge_only_fail: int  # false positives: the judge failed what the person passed
    judge_only_pass: int  # false negatives: failing answers the judge let through
    accuracy: Estimate
    true_positive_rate: Estimate
    true_negative_rate: Estimate
    kappa: Estimate

    def stat(self, name: str) -> float | None:
        """A statistic's value by its ``STATS`` name (``labels`` is the pair count)."""
        if name == "labels":
            return float(self.labels)
        estimate: Estimate = getattr(self, name)
        return estimate.value


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(successes: int, total: int, confidence: float = 0.95) -> Estimate:
    """The share ``successes / total`` with its Wilson score interval; None when ``total`` is 0.

    Example::

        wilson(8, 10)   # Estimate(value=0.8, low=0.490..., high=0.943...)
    """
    if total <= 0:
        return Estimate(None)
    z = _z(confidence)
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    # the bounds at p = 0 and p = 1 are exactly 0 and 1 (rounding would leave 1e-17)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == total else min(1.0, centre + half)
    return Estimate(p, low, high)


def cohen_kappa(
    both_fail: int,
    judge_only_fail: int,
    judge_only_pass: int,
    both_pass: int,
    confidence: float = 0.95,
) -> Estimate:
    """Cohen's kappa of a 2x2 table (judge rows, person columns) with its interval.

    Example::

        cohen_kappa(both_fail=4, judge_only_fail=1, judge_only_pass=2, both_pass=3)
    """
    n = both_fail + judge_only_fail + judge_only_pass + both_pass
    if n == 0:
        return Estimate(None)
    # p[i][j]: judge said i, person said j (0 fail, 1 pass); rows and columns: their marginals
    p = [[both_fail / n, judge_only_fail / n], [judge_only_pass / n, both_pass / n]]
    rows = [p[0][0] + p[0][1], p[1][0] + p[1][1]]
    cols = [p[0][0] + p[1][0], p[0][1] + p[1][1]]
    observed = p[0][0] + p[1][1]
    chance = rows[0] * cols[0] + rows[1] * cols[1]
    if chance >= 1:
        return Estimate(None)
    kappa = (observed - chance) / (1 - chance)
    # Fleiss, Cohen & Everitt (1969): the variance of kappa away from the null
    agree = sum(p[i][i] * (1 - (rows[i] + cols[i]) * (1 - kappa)) ** 2 for i in (0, 1))
    cross = (1 - kappa) ** 2 * sum(
        p[i][j] * (cols[i] + rows[j]) ** 2 for i in (0, 1) for j in (0, 1) if i != j
    )
    variance = (agree + cross - (kappa - chance * (1 - kappa)) ** 2) / (n * (1 - chance) ** 2)
    half = _z(confidence) * math.sqrt(max(variance, 0.0))
    return Estimate(kappa, max(-1.0, kappa - half), min(1.0, kappa + half))


def _table(rule: str, metric: str, pairs: Sequence[tuple[str, str]], conf: float) -> Agreement:
    tp = sum(1 for judge, person in pairs if judge == FAIL and person == FAIL)
    fp = sum(1 for judge, person in pairs if judge == FAIL and person != FAIL)
    fn = sum(1 for judge, person in pairs if judge != FAIL and person == FAIL)
    tn = len(pairs) - tp - fp - fn
    return Agreement(
        rule=rule,
        metric=metric,
        labels=len(pairs),
        both_fail=tp,
        both_pass=tn,
        judge_only_fail=fp,
        judge_only_pass=fn,
        accuracy=wilson(tp + tn, len(pairs), conf),
        true_positive_rate=wilson(tp, tp + fn, conf),
        true_negative_rate=wilson(tn, tn + fp, conf),
        kappa=cohen_kappa(tp, fp, fn, tn, conf),
    )


def agreement(
    pairs: Iterable[tuple[EvaluationRecord, FeedbackRecord]], *, confidence: float = 0.95
) -> list[Agreement]:
    """One :class:`Agreement` per (rule, metric) of the scored, labelled pairs, sorted.

    Results without a judge label (errors, skips) are not pairs: they are left out.
    """
    grouped: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for result, label in pairs:
        if result.status != "scored" or result.label is None:
            continue
        grouped.setdefault((result.rule, result.metric), []).append((result.label, label.label))
    return [
        _table(rule, metric, grouped[(rule, metric)], confidence)
        for rule, metric in sorted(grouped)
    ]


def gauge_rows(
    tables: Iterable[Agreement], *, floor: float, min_labels: int
) -> list[tuple[str, str, str, float]]:
    """``(rule, metric, stat, value)`` rows of the ``spanjudge_judge_agreement`` gauge: every
    defined statistic, and the ``floor`` and ``min_labels`` the alert compares them with."""
    rows: list[tuple[str, str, str, float]] = []
    for table in tables:
        for name in STATS:
            value = table.stat(name)
            if value is not None:
                rows.append((table.rule, table.metric, name, value))
        rows.append((table.rule, table.metric, "floor", float(floor)))
        rows.append((table.rule, table.metric, "min_labels", float(min_labels)))
    return rows
