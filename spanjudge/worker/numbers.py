"""The worker's numbers: interval gauges per rule x segment and a continuous regression check.

At most once per ``interval_refresh_seconds``, on a Prometheus scrape or on the worker's own
periodic check (:meth:`NumbersWatch.start`: the regression WARNING does not wait for a scrape),
the worker sums the store's results (one grouped query per key, ``summary_sums``) and publishes:

* ``spanjudge_segment_pass_rate{rule, metric, segment_key, segment, bound}`` and
  ``spanjudge_segment_mean_score{...}``, ``bound`` = ``estimate`` | ``low`` | ``high`` (95%):
  what a dashboard draws as a band, over ``interval_window_seconds``;
* ``spanjudge_segment_results{..., status}`` (scored, skipped, error) in that window;
* ``spanjudge_segment_folded{rule, metric, segment_key}``: segments beyond ``segment_cap`` per
  rule, folded into the segment ``other`` (``(other)`` when a real segment has that name; the
  series per rule stay bounded);
* ``spanjudge_segment_under_covered{rule, metric, segment_key, segment}``: 1 when the rule
  states a ``target_half_width`` and the segment's pass-rate interval is wider (or it has none),
  else 0; the planner logs each such segment once as a WARNING (its allocation);
* ``spanjudge_regression{rule, metric, segment_key, baseline, candidate, measure, stat}``,
  ``stat`` = ``effect`` | ``low`` | ``high`` | ``e_value`` | ``decision`` (-1 worse, 0 none
  yet, +1 better), ``measure`` = ``pass_rate`` | ``mean_score``: each candidate segment
  against the baseline (``regression_baseline``: a value of ``regression_key``, or
  ``"previous"``: the segment whose first result is the newest against the one before it).

A candidate that becomes worse is logged once as a WARNING naming the rule, both segments and
the effect. Methods: docs/numbers.md. Settings (read with ``getattr`` so older settings objects
work): :class:`NumbersConfig`.

Example::

    watch = NumbersWatch(store, NumbersConfig(regression_key="service.version",
                                              regression_baseline="previous"), meter_provider)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from spanjudge._core.metric_names import METER_NAME
from spanjudge._store.summaries import ALL, UNSET, SegmentSums
from spanjudge.evaluators._review.estimates import OTHER, fold_segments, summarize
from spanjudge.evaluators._review.regressions import (
    DECISION_VALUE,
    WORSE,
    Comparison,
    compare_segments,
)
from spanjudge.rule_settings import precision_targets
from spanjudge.settings import WorkerSettings

__all__ = ["METRICS", "UNDER_COVERED", "NumbersConfig", "NumbersWatch", "watch_numbers"]

logger = logging.getLogger("spanjudge.regressions")

PASS_RATE: Final = "spanjudge.segment.pass_rate"
MEAN_SCORE: Final = "spanjudge.segment.mean_score"
SEGMENT_RESULTS: Final = "spanjudge.segment.results"
SEGMENTS_FOLDED: Final = "spanjudge.segment.folded"
UNDER_COVERED: Final = "spanjudge.segment.under_covered"
REGRESSION: Final = "spanjudge.regression"
METRICS: Final = (
    PASS_RATE, MEAN_SCORE, SEGMENT_RESULTS, SEGMENTS_FOLDED, UNDER_COVERED, REGRESSION
)  # fmt: skip
PREVIOUS: Final = "previous"
NO_KEY: Final = "none"  # the segment_key label of the rows not split by a key

Rows = list[tuple[float, dict[str, str]]]
Sums = Mapping[tuple[str, str, str], SegmentSums]


def _setting(name: str) -> Any:
    """The default of the worker setting ``name``."""
    return WorkerSettings.model_fields[name].default


@dataclass(frozen=True)
class NumbersConfig:
    """What the worker's numbers cover; each field is a worker setting of the same name."""

    # the defaults are the worker settings' own (spanjudge/settings.py), never spelt again here
    interval_keys: tuple[str, ...] = _setting("interval_keys")
    interval_window_seconds: float = _setting("interval_window_seconds")
    segment_cap: int = _setting("segment_cap")
    regression_key: str | None = None  # None: no regression check (the settings' baseline table)
    regression_baseline: str = PREVIOUS  # a value of regression_key, or "previous"
    regression_window_seconds: float = _setting("regression_window_seconds")
    regression_alpha: float = _setting("regression_alpha")
    interval_refresh_seconds: float = _setting("interval_refresh_seconds")
    #: (rule name, target_half_width) of the rules that state a precision target
    targets: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_settings(cls, settings: Any) -> NumbersConfig:
        """The settings' values for the fields they have; ``regression_baseline`` may be a
        mapping ``{key = "service.version", value = "1.4.0"}`` (value default "previous")."""
        values: dict[str, Any] = {}
        for name in cls.__dataclass_fields__:
            if name in ("regression_baseline", "targets"):
                continue
            if getattr(settings, name, None) is not None:
                values[name] = getattr(settings, name)
        baseline = getattr(settings, "regression_baseline", None)
        if baseline is not None and hasattr(baseline, "key"):  # the settings' table
            baseline = {"key": baseline.key, "value": getattr(baseline, "value", None)}
        if isinstance(baseline, Mapping):
            values["regression_key"] = baseline.get("key") or values.get("regression_key")
            values["regression_baseline"] = str(baseline.get("value") or PREVIOUS)
        elif isinstance(baseline, str) and baseline:
            values["regression_baseline"] = baseline
        if "interval_keys" in values:
            values["interval_keys"] = tuple(values["interval_keys"])
        values["targets"] = tuple(sorted(precision_targets(getattr(settings, "rules", []))))
        return cls(**values)


def _pairs(sums: Sums, config: NumbersConfig) -> list[tuple[str, str]]:
    """(baseline, candidate) segment pairs to compare."""
    seen: dict[str, SegmentSums] = {}
    for (_rule, _metric, segment), s in sums.items():
        if segment not in (UNSET, OTHER, ALL):
            seen.setdefault(segment, SegmentSums()).add(s)
    if config.regression_baseline == PREVIOUS:
        # by first result, not last: a canary and the version it replaces both take traffic,
        # and which answered last must not swap baseline and candidate between refreshes
        newest = sorted(seen, key=lambda segment: seen[segment].first_at, reverse=True)
        return [(newest[1], newest[0])] if len(newest) >= 2 else []
    base = config.regression_baseline
    if base not in seen:
        return []
    others = sorted((s for s in seen if s != base), key=lambda s: -seen[s].scored)
    return [(base, candidate) for candidate in others[: config.segment_cap]]


class NumbersWatch:
    """The gauges above on ``meter_provider``, computed from ``store`` when scraped."""

    def __init__(
        self,
        store: Any,
        config: NumbersConfig,
        meter_provider: MeterProvider,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._state: tuple[float, dict[str, Rows]] | None = None
        self._worse: set[tuple[str, ...]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        meter = meter_provider.get_meter(METER_NAME)  # the scope of every spanjudge metric
        for name, description in (
            (PASS_RATE, "Pass rate per rule x segment with its 95% interval (bound label)"),
            (MEAN_SCORE, "Mean score per rule x segment with its 95% interval (bound label)"),
            (SEGMENT_RESULTS, "Results per rule x segment in the interval window, by status"),
            (SEGMENTS_FOLDED, "Segments per rule beyond the cap, folded into 'other'"),
            (UNDER_COVERED, "1: the segment's pass-rate interval misses its rule's target"),
            (REGRESSION, "Candidate vs baseline segment: effect, its interval, decision"),
        ):
            meter.create_observable_gauge(
                name, callbacks=[self._observer(name)], description=description
            )

    def _observer(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            try:
                rows = self.latest().get(name, [])
            except Exception:  # a scrape must never fail for a store hiccup
                logger.debug("numbers refresh failed", exc_info=True)
                return []
            return [Observation(value, labels) for value, labels in rows]

        return observe

    def check(self) -> None:
        """Recompute when due, as a scrape would: a candidate that became worse is logged
        even when nothing scrapes the metrics. Never raises (a store hiccup is retried at the
        next check)."""
        try:
            self.rows()
        except Exception:
            logger.warning("numbers check failed; the next one retries", exc_info=True)

    def latest(self) -> dict[str, Rows]:
        """What a scrape shows. While the refresh thread runs (:meth:`start`), the rows of its
        last round: a scrape never sums the store then, so a sum slower than the scrape's
        deadline cannot fail every scrape (it did with ``interval_refresh_seconds = 1``).
        Without the thread, :meth:`rows`."""
        if self._thread is None:
            return self.rows()
        state = self._state  # read without the lock: a round in progress holds it
        return state[1] if state is not None else {}

    def start(self, *, refresh: bool = False) -> None:
        """Run :meth:`check` now and every ``interval_refresh_seconds`` in a daemon thread,
        when a regression baseline is set (it logs even when nothing scrapes), or with
        ``refresh`` (the worker): scrapes then read the thread's last round (:meth:`latest`)."""
        if self._thread is not None or not (refresh or self.config.regression_key):
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="spanjudge-numbers", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the periodic check (a check under way finishes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        self.check()  # the first round runs even when stop() follows at once
        while not self._stop.wait(self.config.interval_refresh_seconds):
            self.check()

    def rows(self) -> dict[str, Rows]:
        """Every gauge's (value, labels) rows, recomputed at most once per refresh."""
        now = self.clock()
        with self._lock:
            if self._state is None or now - self._state[0] >= self.config.interval_refresh_seconds:
                self._state = (now, self.compute(now))
            return self._state[1]

    def compute(self, now: float) -> dict[str, Rows]:
        config = self.config
        out: dict[str, Rows] = {name: [] for name in METRICS}
        keys: list[str | None] = [None, *config.interval_keys]
        for key in keys:
            sums = self.store.summary_sums(by=key, since=now - config.interval_window_seconds)
            kept, folded = fold_segments(sums, config.segment_cap)
            label = key or NO_KEY
            for row in summarize(kept, by=key, folded=folded, targets=dict(config.targets)):
                base = {"rule": row.rule, "metric": row.metric, "segment_key": label,
                        "segment": row.segment}  # fmt: skip
                if row.target_half_width is not None:
                    out[UNDER_COVERED].append((float(row.under_covered), base))
                for gauge, estimate in ((PASS_RATE, row.pass_rate), (MEAN_SCORE, row.mean_score)):
                    for bound in ("value", "low", "high"):
                        value = getattr(estimate, bound)
                        if value is not None:
                            bound_label = "estimate" if bound == "value" else bound
                            out[gauge].append((float(value), {**base, "bound": bound_label}))
                for status, count in (("scored", row.scored), ("skipped", row.skipped),
                                      ("error", row.errors)):  # fmt: skip
                    out[SEGMENT_RESULTS].append((float(count), {**base, "status": status}))
            for (rule, metric, _fold), count in folded.items():
                labels = {"rule": rule, "metric": metric, "segment_key": label}
                out[SEGMENTS_FOLDED].append((float(count), labels))
        if config.regression_key:
            out[REGRESSION] = self._regressions(now)
        return out

    def _regressions(self, now: float) -> Rows:
        config = self.config
        key = config.regression_key or ""
        sums = self.store.summary_sums(by=key, since=now - config.regression_window_seconds)
        rows: Rows = []
        worse: set[tuple[str, ...]] = set()
        pairs = _pairs(sums, config)
        for baseline, candidate in pairs:
            for row in compare_segments(
                sums, key=key, baseline=baseline, candidate=candidate,
                alpha=config.regression_alpha,
            ):  # fmt: skip
                rows.extend(_regression_rows(row))
                for effect in (row.pass_rate, row.mean_score):
                    if effect.decision == WORSE:
                        ident = (row.rule, row.metric, key, baseline, candidate, effect.measure)
                        worse.add(ident)
                        if ident not in self._worse:
                            _log_worse(row, effect.measure)
        for rule, _metric, key, baseline, candidate, measure in sorted(self._worse - worse):
            if (baseline, candidate) not in pairs:
                continue  # no longer compared (a newer version came): not a recovery
            logger.info(
                "no longer worse: rule %s %s with %s=%s against %s=%s",
                rule, measure.replace("_", " "), key, candidate, key, baseline,
            )  # fmt: skip
        self._worse = worse
        return rows


def _regression_rows(row: Comparison) -> Rows:
    rows: Rows = []
    for effect in (row.pass_rate, row.mean_score):
        labels = {"rule": row.rule, "metric": row.metric, "segment_key": row.key,
                  "baseline": row.baseline, "candidate": row.candidate,
                  "measure": effect.measure}  # fmt: skip
        stats = {
            "effect": effect.difference.value,
            "low": effect.difference.low,
            "high": effect.difference.high,
            "e_value": effect.e_value,
            "decision": DECISION_VALUE[effect.decision],
        }
        rows.extend((float(v), {**labels, "stat": s}) for s, v in stats.items() if v is not None)
    return rows


def _log_worse(row: Comparison, measure: str) -> None:
    effect = row.pass_rate if measure == "pass_rate" else row.mean_score
    d = effect.difference
    logger.warning(
        "regression: rule %s %s is worse with %s=%s than with %s=%s: %s %.3f -> %.3f, effect "
        "%.3f [%.3f, %.3f] (%.0f%% confidence sequence, e-value %.3g)",
        row.rule, measure.replace("_", " "), row.key, row.candidate, row.key, row.baseline,
        measure.replace("_", " "), effect.baseline.value, effect.candidate.value,
        d.value, d.low, d.high, 100 * (1 - effect.alpha), effect.e_value,
    )  # fmt: skip


def watch_numbers(
    store: Any, settings: Any, meter_provider: MeterProvider, *, clock: Callable[[], float]
) -> NumbersWatch | None:
    """The worker's :class:`NumbersWatch` (None when the store cannot sum results)."""
    if not hasattr(store, "summary_sums"):
        return None
    return NumbersWatch(store, NumbersConfig.from_settings(settings), meter_provider, clock=clock)
