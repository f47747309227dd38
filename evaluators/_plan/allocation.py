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

Decisions stay deterministic: a target is kept when its stable hash point
(:func:`~spanjudge.evaluators._plan.sampler.sample_point`) is under its probability.
The probability depends only on the allocation state (the sums read at the last refresh, at
most every :data:`REFRESH_SECONDS`), the target's segment value and its risk signals, so every
worker reading the same store and every replay with the same state decides the same. The
probability is recorded on the result (``sample_rate``), whose weight ``1/p`` keeps every
estimate unbiased. A segment the state does not know yet, and every target before the first
refresh, is sampled at the rule's ``sample_rate``.

Example::

    big = SegmentSums(verdicts=100, pass_weight=10000.0, passed_weight=9500.0)
    small = SegmentSums(verdicts=50, pass_weight=50.0, passed_weight=40.0)
    allocate({"big": big, "small": small}, per_day=200)  # {"big": 0.015, "small": 1.0}
"""

from __future__ import annotations

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

__all__ = [
    "MIN_PROBABILITY",
    "REFRESH_SECONDS",
    "Allocation",
    "AllocationSource",
    "AllocationState",
    "allocate",
    "budget_level",
    "segment_value",
]

MIN_PROBABILITY = 1e-4
"""The lowest probability a segment gets: every segment keeps being looked at, weights stay
under 10,000."""
REFRESH_SECONDS = 300.0
"""How often a rule's allocation is read again from the store."""
_FAIL_CACHE = 5000  # traces whose labels are remembered (a few pages of planning)
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


@dataclass(frozen=True)
class AllocationState:
    """What a rule's decisions depend on besides the target: read at ``computed_at``."""

    probabilities: Mapping[str, float]
    #: when each ``service.version`` got its first result (new versions are a risk signal)
    versions_first_seen: Mapping[str, float] = field(default_factory=dict)
    computed_at: float = -math.inf


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
        it shows a risk signal (:mod:`~spanjudge.evaluators._plan.risk`)."""
        state = self.state(rule, now)
        value = segment_value(target, rule.allocate_by, rule.segment_keys)
        rate = state.probabilities.get(value, rule.sample_rate)
        if rule.risk_sample_rate <= rate:
            return rate
        risky = risk_signals(
            target,
            spans,
            first_seen=state.versions_first_seen,
            labelled_fail=self._labelled_fail(target.trace_id),
        )
        return max(rate, rule.risk_sample_rate) if risky else rate

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
        probabilities = allocate(
            by_segment,
            per_day=per_day,
            half_width=rule.target_half_width,
            window_days=window_days,
        )
        versions = _per_segment(
            summary(by="service.version", since=now - VERSION_WINDOW_SECONDS, rule=rule.name)
        )
        first_seen = {v: s.first_at for v, s in versions.items() if math.isfinite(s.first_at)}
        return AllocationState(probabilities, first_seen, now)


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
