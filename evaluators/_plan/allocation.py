"""Judge budgets spent where they tell the most: per-segment sampling probabilities.

A rule that states a target (``budget_per_day`` evaluations, ``budget_cost_per_day`` dollars,
``target_half_width`` of the pass-rate interval per segment) is sampled with a probability per
segment of its ``allocate_by`` key instead of one fixed rate. :func:`allocate` computes them
from the store's summary sums of the rule's last 24 hours (``spanjudge/_store/summaries``):

* each segment's traffic ``N`` (targets with a verdict per day, estimated as the sum of the
  results' weights ``1/p``) and its pass-rate variance ``S^2 = p (1 - p)``, ``p`` shrunk as
  ``(passed + 1) / (verdicts + 2)`` so a segment seen passing 20 of 20 is not certain;
* the verdicts a segment needs per day, ``n = z^2 S^2 / h^2`` for half-width ``h``: the same
  precision in every segment, so a small or uncertain segment gets a larger share of its traffic
  and a large, settled one a smaller share;
* under a budget ``B`` alone, ``n`` proportional to ``S^2`` scaled so the expected calls
  ``sum(min(n, N))`` meet ``B`` (the allocation minimising the largest segment variance); with
  both, the lower of the two levels. The probability is ``n / N``, at most 1, at least
  :data:`MIN_PROBABILITY`.

**A budget is a budget.** Under ``budget_per_day`` (or the daily evaluations a
``budget_cost_per_day`` buys) the segments share ``(1 - risk_budget_share)`` of it, less a
margin of two standard deviations of a day's Poisson count (``2 sqrt(B)``), so a day's calls
stay under the budget rather than meeting it on average; risk boosts (a new version's first
six hours, an error, a fail label: :mod:`~spanjudge.evaluators._plan.risk`) spend from the
remaining ``risk_budget_share``: each boost's expected extra calls (its raised probability
minus its segment's) are counted per UTC day, and once the share is spent a risky target is
sampled at its segment's rate until the day rolls over. The planner's
:class:`~spanjudge.evaluators._plan.sampler.Budget` refuses any admission past
``budget_per_day`` (a hard cap: the allocation makes it rare). No burst past the budget is
allowed, a deploy day included.

**Segments that cannot reach the target.** With ``target_half_width`` a segment needs
``n = z^2 S^2 / h^2`` verdicts a day; one whose traffic (or share of the budget) gives fewer is
listed in :attr:`AllocationState.short` with the half-width it can expect, ``z sqrt(S^2 / n)``,
and so is a segment the planner saw targets of but that has no verdict in the window (sampled at
the cold-start rate, it may go days without one); each is logged once as a WARNING naming the
rule and the segment. ``scores --summary`` and the worker's ``spanjudge_segment_under_covered``
gauge report the segments whose interval is wider than the target.

Decisions stay deterministic: a target is kept when its stable hash point
(:func:`~spanjudge.evaluators._plan.sampler.sample_point`) is under its probability.
The probability depends only on the allocation state (the sums read at the last refresh, at
most every :data:`REFRESH_SECONDS`), the target's segment value and its risk signals, so every
worker reading the same store and every replay with the same state decides the same (the risk
share's daily count is the one exception: it is this process's, in the order it plans). The
probability is recorded on the result (``sample_rate``), whose weight ``1/p`` keeps every
estimate unbiased. A segment the state does not know yet, and every target before the first
refresh, is sampled at the rule's ``sample_rate``.

Example::

    big = SegmentSums(verdicts=100, pass_weight=10000.0, passed_weight=9500.0)
    small = SegmentSums(verdicts=50, pass_weight=50.0, passed_weight=40.0)
    allocate({"big": big, "small": small}, per_day=200)  # {"big": 0.015, "small": 1.0}
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Protocol

from spanjudge._store.summaries import UNSET, SegmentSums, SummarySource
from spanjudge.evaluators._plan.risk import risk_signals

if TYPE_CHECKING:
    from spanjudge._core.span_record import SpanRecord
    from spanjudge.evaluators._plan.rules import Rule
    from spanjudge.evaluators._rebuild.targets import Target

logger = logging.getLogger("spanjudge.allocation")

__all__ = [
    "MIN_PROBABILITY",
    "REFRESH_SECONDS",
    "Allocation",
    "AllocationSource",
    "AllocationState",
    "allocate",
    "budget_level",
    "segment_value",
    "short_segments",
]

MIN_PROBABILITY = 1e-4
"""The lowest probability a segment gets: every segment keeps being looked at, weights stay
under 10,000."""
REFRESH_SECONDS = 300.0
"""How often a rule's allocation is read again from the store."""
_FAIL_CACHE = 5000  # traces whose labels are remembered (a few pages of planning)
_MAX_COLD = 1000  # cold segments remembered per rule between refreshes
_MAX_WARNED = 10_000  # rule x segment pairs warned about (each once)
WINDOW_SECONDS = 86400.0
"""The window of results an allocation is computed from (the interval gauges' 24 hours)."""
VERSION_WINDOW_SECONDS = 7 * 86400.0
"""The window a version's first result is looked for in (the regression comparison's)."""


class AllocationSource(SummarySource, Protocol):
    """What an allocation reads from the store (the SQL stores implement it): the summary sums
    and, for a cost budget, the judge cost of a rule's results."""

    def results_cost_since(self, *, rule: str, since: float) -> float: ...


def _spread(s: SegmentSums) -> tuple[float, float]:
    """(traffic weight N over the window, variance S^2) of one segment's sums."""
    shrunk = (
        (s.passed_weight / s.pass_weight * s.verdicts + 1) / (s.verdicts + 2)
        if (s.pass_weight > 0)
        else 0.5
    )
    return s.pass_weight, shrunk * (1 - shrunk)


def budget_level(
    traffic: Mapping[str, float], variance: Mapping[str, float], per_day: float
) -> float:
    """The level ``c`` with ``sum(min(c S^2, N)) = per_day`` (``inf`` when the budget covers
    every target), found by filling segments in order of ``N / S^2``."""
    order = sorted(traffic, key=lambda k: traffic[k] / variance[k])
    left, rest = per_day, sum(variance.values())
    for key in order:
        if rest <= 0:
            break
        level = left / rest
        if level * variance[key] < traffic[key]:
            return level
        left -= traffic[key]
        rest -= variance[key]
    return math.inf


def allocate(
    sums: Mapping[str, SegmentSums],
    *,
    per_day: float | None = None,
    half_width: float | None = None,
    window_days: float = 1.0,
    confidence: float = 0.95,
) -> dict[str, float]:
    """Per segment value, the probability to sample its targets with (see the module doc).

    ``sums``: the rule's sums per segment over ``window_days`` days. Segments without a verdict
    are left out (the caller samples them at its cold-start rate).
    """
    traffic: dict[str, float] = {}
    variance: dict[str, float] = {}
    for key, s in sums.items():
        if s.verdicts <= 0 or s.pass_weight <= 0:
            continue
        weight, var = _spread(s)
        traffic[key] = weight / max(window_days, 1e-9)
        variance[key] = var
    levels = []
    if half_width is not None:
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        levels.append(z * z / (half_width * half_width))
    if per_day is not None:
        levels.append(budget_level(traffic, variance, per_day))
    level = min(levels) if levels else math.inf
    return {
        key: max(MIN_PROBABILITY, min(1.0, level * variance[key] / traffic[key])) for key in traffic
    }


def short_segments(
    sums: Mapping[str, SegmentSums],
    probabilities: Mapping[str, float],
    *,
    half_width: float,
    window_days: float = 1.0,
    confidence: float = 0.95,
) -> dict[str, float]:
    """Segments whose expected verdicts a day at ``probabilities`` cannot reach
    ``half_width``, each with the half-width it can expect (``z sqrt(S^2 / n)``)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    out: dict[str, float] = {}
    for key, s in sums.items():
        if key not in probabilities or s.pass_weight <= 0:
            continue
        weight, var = _spread(s)
        expected = probabilities[key] * weight / max(window_days, 1e-9)
        reachable = z * math.sqrt(var / expected) if expected > 0 else math.inf
        if reachable > half_width * (1 + 1e-9):
            out[key] = reachable
    return out


@dataclass(frozen=True)
class AllocationState:
    """What a rule's decisions depend on besides the target: read at ``computed_at``."""

    probabilities: Mapping[str, float]
    #: when each ``service.version`` got its first result (new versions are a risk signal)
    versions_first_seen: Mapping[str, float] = field(default_factory=dict)
    computed_at: float = -math.inf
    #: expected extra calls a day risk boosts may spend (None: no budget, boosts unbounded)
    risk_allowance: float | None = None
    #: segments that cannot reach ``target_half_width``, with the half-width they can expect
    short: Mapping[str, float] = field(default_factory=dict)


def _per_segment(sums: Mapping[tuple[str, str, str], SegmentSums]) -> dict[str, SegmentSums]:
    out: dict[str, SegmentSums] = {}
    for (_rule, _metric, value), s in sums.items():
        out.setdefault(value, SegmentSums()).add(s)
    return out


class Allocation:
    """Each target rule's allocation state, refreshed from ``store`` at most every
    ``refresh_seconds``. Thread-safe. Rules without a target are not looked at.

    Example::

        allocation = Allocation(store)
        state = allocation.state(rule, now=time.time())
        p = state.probabilities.get("checkout", rule.sample_rate)
    """

    def __init__(self, store: Any, *, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self._store = store
        self._refresh = refresh_seconds
        self._lock = threading.Lock()
        self._states: dict[str, AllocationState] = {}
        self._fail_labels: dict[str, bool] = {}
        # per rule: (UTC day, expected extra calls its risk boosts spent that day)
        self._risk_spent: dict[str, tuple[int, float]] = {}
        # per rule: segments planned at the cold-start rate -> when last (bounded, 24 hours)
        self._cold: dict[str, dict[str, float]] = {}
        self._warned: set[tuple[str, str]] = set()

    def state(self, rule: Rule, now: float) -> AllocationState:
        """The rule's allocation state, read again when older than the refresh interval."""
        with self._lock:
            current = self._states.get(rule.name)
            if current is not None and now - current.computed_at < self._refresh:
                return current
        fresh = self.compute(rule, now)
        with self._lock:
            self._states[rule.name] = fresh
        return fresh

    def probability(
        self, rule: Rule, target: Target, spans: Sequence[SpanRecord], now: float
    ) -> float:
        """A target rule's probability for ``target``: its segment's in the allocation (the
        rule's ``sample_rate`` for a segment not seen yet), at least ``risk_sample_rate`` when
        it shows a risk signal (:mod:`~spanjudge.evaluators._plan.risk`) and the day's risk
        share of the budget is not spent yet."""
        state = self.state(rule, now)
        value = segment_value(target, rule.allocate_by, rule.segment_keys)
        rate = state.probabilities.get(value)
        if rate is None:
            rate = rule.sample_rate
            if rule.target_half_width is not None:
                with self._lock:
                    cold = self._cold.setdefault(rule.name, {})
                    if value in cold or len(cold) < _MAX_COLD:
                        cold[value] = now
        if rule.risk_sample_rate <= rate:
            return rate
        risky = risk_signals(
            target,
            spans,
            first_seen=state.versions_first_seen,
            labelled_fail=self._labelled_fail(target.trace_id),
        )
        if not risky:
            return rate
        boosted = max(rate, rule.risk_sample_rate)
        return boosted if self._spend_risk(rule.name, state, boosted - rate, now) else rate

    def _spend_risk(self, rule: str, state: AllocationState, extra: float, now: float) -> bool:
        """Charge a boost's expected extra calls to the day's risk share; False when the share
        cannot pay for it (no budget: always True)."""
        if state.risk_allowance is None:
            return True
        day = int(now // 86400)
        with self._lock:
            spent_day, spent = self._risk_spent.get(rule, (day, 0.0))
            if spent_day != day:
                spent = 0.0
            if spent + extra > state.risk_allowance:
                return False
            self._risk_spent[rule] = (day, spent + extra)
            return True

    def _labelled_fail(self, trace_id: str | None) -> bool:
        if trace_id is None:
            return False
        with self._lock:
            found = self._fail_labels.get(trace_id)
        if found is None:
            read = getattr(self._store, "feedback", None)
            labels = read(trace_id=trace_id, limit=100) if read is not None else []
            found = any(label.label == "fail" for label in labels)
            with self._lock:
                if len(self._fail_labels) >= _FAIL_CACHE:
                    self._fail_labels.clear()
                self._fail_labels[trace_id] = found
        return found

    def forget_labels(self, trace_ids: Sequence[str]) -> None:
        """Read these traces' labels again next time (a person labelled them since)."""
        with self._lock:
            for trace_id in trace_ids:
                self._fail_labels.pop(trace_id, None)

    def set_state(self, rule: Rule, state: AllocationState) -> None:
        """Use ``state`` for ``rule`` (a replay reproducing a worker's decisions, tests)."""
        with self._lock:
            self._states[rule.name] = state

    def compute(self, rule: Rule, now: float) -> AllocationState:
        """The rule's allocation from the store's sums of the last 24 hours."""
        summary: Callable[..., Mapping[tuple[str, str, str], SegmentSums]] | None = getattr(
            self._store, "summary_sums", None
        )
        if summary is None:
            return AllocationState({}, computed_at=now)
        since = now - WINDOW_SECONDS
        by_segment = _per_segment(summary(by=rule.allocate_by, since=since, rule=rule.name))
        seen = min((s.first_at for s in by_segment.values()), default=now)
        window_days = max(min(now - seen, WINDOW_SECONDS), self._refresh) / 86400.0
        per_day = _per_day(rule, self._store, by_segment, since)
        boosts = per_day is not None and rule.risk_sample_rate > 0
        share = rule.risk_budget_share if boosts else 0.0
        planned = None
        if per_day is not None:
            planned = per_day * (1 - share)
            planned = max(planned - 2 * math.sqrt(planned), planned / 2)  # the day's margin
        probabilities = allocate(
            by_segment,
            per_day=planned,
            half_width=rule.target_half_width,
            window_days=window_days,
        )
        # judged once the results span (most of) the day the target is over: before, every
        # segment looks short (the oldest result in the window is at most 24 hours old)
        judged = rule.target_half_width is not None and now - seen >= 0.9 * WINDOW_SECONDS
        short = (
            short_segments(
                by_segment,
                probabilities,
                half_width=rule.target_half_width,
                window_days=window_days,
            )
            if judged and rule.target_half_width is not None
            else {}
        )
        versions = _per_segment(
            summary(by="service.version", since=now - VERSION_WINDOW_SECONDS, rule=rule.name)
        )
        first_seen = {v: s.first_at for v, s in versions.items() if math.isfinite(s.first_at)}
        if rule.target_half_width is not None:
            with self._lock:
                seen_cold = self._cold.get(rule.name, {})
                for value in [v for v, at in seen_cold.items() if now - at >= WINDOW_SECONDS]:
                    del seen_cold[value]  # not planned for a day: no longer reported
                cold = set(seen_cold)
            if judged:
                short = {**{v: math.inf for v in cold if v not in probabilities}, **short}
                self._warn_short(rule, short)
        allowance = per_day * share if per_day is not None and boosts else None
        return AllocationState(probabilities, first_seen, now, allowance, short)

    def _warn_short(self, rule: Rule, short: Mapping[str, float]) -> None:
        """One WARNING per rule x segment that cannot reach the rule's target."""
        for value, reachable in sorted(short.items()):
            if (rule.name, value) in self._warned or len(self._warned) >= _MAX_WARNED:
                continue
            self._warned.add((rule.name, value))
            if math.isinf(reachable):
                logger.warning(
                    "rule %s: segment %s=%s has no verdict in the last 24 hours: sampled at "
                    "the cold-start rate %g, it cannot reach the target half-width %g",
                    rule.name, rule.allocate_by, value, rule.sample_rate, rule.target_half_width,
                )  # fmt: skip
            else:
                logger.warning(
                    "rule %s: segment %s=%s gets too few verdicts for the target half-width "
                    "%g: about %.3g is all its traffic or budget allows",
                    rule.name, rule.allocate_by, value, rule.target_half_width, reachable,
                )  # fmt: skip


_MAX_VALUE_CHARS = 128
_MAX_RULE_KEYS = 8


def segment_value(target: Target, key: str, segment_keys: Sequence[str] = ()) -> str:
    """The value of ``key`` the target's result will carry (``UNSET`` when none).

    A second copy of ``review.segments.result_segments`` for one key: planning sits below
    review in the import graph (review's explain imports the sampler), and this reads only the
    one key, not four. ``tests/evaluators/online/test_allocation.py`` holds the two together.
    """
    span = target.span
    resource = span.resource if span is not None else {}
    found: Any = None
    if key in list(segment_keys)[:_MAX_RULE_KEYS] and span is not None:
        found = span.attributes.get(key)
        found = _text(found if found is not None else resource.get(key))
    if found is not None:  # a rule's key wins over a built-in one of the same name
        return str(found)
    value: Any = None
    if key == "service":
        value = target.service_name
    elif key == "service.version":
        value = resource.get("service.version")
    elif key in ("model", "agent") and span is not None:
        try:
            from spanjudge.evaluators._rebuild.dialects import read_span

            view = read_span(span)
            value = view.model if key == "model" else view.agent_name
        except Exception:  # as for the result: a value that cannot be read is left out
            value = None
    return _text(value) or UNSET


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, (list, dict, tuple)):
        return None
    text = str(value).strip()
    return text[:_MAX_VALUE_CHARS] if text else None


def _per_day(
    rule: Rule, store: Any, by_segment: Mapping[str, SegmentSums], since: float
) -> float | None:
    """The rule's budget in evaluations per day: ``budget_per_day``, and ``budget_cost_per_day``
    over the mean judge cost of its results in the window (once it has a cost)."""
    budgets = [] if rule.budget_per_day is None else [float(rule.budget_per_day)]
    if rule.budget_cost_per_day is not None:
        results = sum(s.scored + s.errors + s.skipped for s in by_segment.values())
        cost = store.results_cost_since(rule=rule.name, since=since) if results else 0.0
        if cost > 0:
            budgets.append(rule.budget_cost_per_day / (cost / results))
    return min(budgets) if budgets else None
