"""What a precision target buys: coverage, regressions found, false alarms, judge calls.

Synthetic traffic with known true pass rates per segment (``service``: a large, two middle and
a small segment) runs for ``--days`` days; at the start of day 2 the large segment deploys
version 1.5.0, whose pass rate drops from 0.92 to 0.85 (the planted regression), or stays
(the null runs, half of ``--runs``). Two samplers see the same targets and the same outcomes:

* the **budget sampler**: a rule with ``target_half_width`` (0.05), ``sample_rate`` 0.05 as the
  cold-start rate and ``risk_sample_rate`` 0.25. Its probabilities come from the real
  :class:`~spanjudge.evaluators._plan.allocation.Allocation` refreshed every hour
  over the sums of the last 24 hours (a store stand-in answers ``summary_sums``), the new-version
  risk signal from the real ``risk_signals`` (once per version and hour), the decision from the
  real ``is_sampled`` hash;
* a **fixed rate**: the rate at which the smallest segment reaches the same precision
  (``z^2 p (1 - p) / h^2`` verdicts of its daily traffic).

The judge is a stub answering from the planted truth (no HTTP: the point is the statistics,
and a judge server would add minutes per run, not information). ``through_planner`` then runs
two days of the same segments through the real planner on a SQLite store: spans written and
planned hourly, jobs completed by the stub judge with their recorded probability, the
allocation read from the store's own summary sums.
Every result carries weight ``1 / p``; estimates are the real ``pass_rate`` (Hajek, weighted
Wilson) and ``compare_pass_rate`` (confidence sequence) on the summed weights, checked after
every evaluation of the new version.

Prints JSON: per sampler and segment the coverage of the daily 95% interval (days 1 and on),
its mean half-width and daily judge calls; evaluations of 1.5.0 until it is flagged worse; runs
and days with a false alarm among the null runs, beside the rate the test states (alpha = 0.05
over a comparison's whole life).

``cells`` (issue 40) draws the traffic our own sampling design makes, where the figures used to
fail:

* ``intervals``: the 95% pass-rate interval per weight design (``equal``; the budget sampler
  alone; the budget sampler with a risk-boosted 5% at rate 1; 90% of the verdicts at 2% beside a
  boosted 10%), n = 10, 30, 100, 1000 and p = 0.5, 0.9, 0.99; the mean-score interval for
  bimodal scores and scores piled at 1.0 (97%, 99.5% ones): coverage, zero-width intervals,
  how often the effective size exceeded Kish's;
* ``sequential``: the regression test's false alarms under "no difference", read after every
  candidate verdict, with a large fixed baseline or one that starts at 20 verdicts and grows
  beside the candidate, under those weights;
* ``traffic``: days of four segments (5,000, 500, 100 and 5 targets a day; 3% risky traces
  failing more often) through the real allocation, risk signals, hash and the planner's daily
  budget: a budget alone, ``risk_sample_rate`` 1.0 beside a budget, and a deploy day (every
  target of the busy segment's new version a risk for six hours): judge calls a day against
  the budget, and per segment the daily interval's coverage, days without a verdict and days
  the allocation reported it under-covered;
* ``fold``: a real segment named ``other`` among 14 folded to a cap of 4;
* ``done_when``: the issue's checks over all of them.

The full run's replicates: 4,000 a cell for intervals (1,000 at n = 1000), 1,000 runs of 300
looks a sequential cell, 12 runs of 5 days a traffic cell; the budget/fixed comparison above
runs 100 runs (it was 400: a quarter keeps the whole benchmark near 10 minutes on 2 shared
CPUs; its coverage figures then have a standard error near 1.1 points).

    python benchmarks/sampling.py [--runs 100] [--days 4] [--half-width 0.05] [--replicates 4000]
    python benchmarks/sampling.py --only-cells   # the issue-40 cells alone (about 3 minutes)
    python benchmarks/sampling.py --smoke        # a few runs of each; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.summaries import SegmentSums
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._plan.allocation import Allocation
from spanjudge.evaluators._plan.risk import risk_signals
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import is_sampled
from spanjudge.evaluators._rebuild.targets import Target
from spanjudge.evaluators._review.estimates import mean_interval, pass_rate
from spanjudge.evaluators._review.regressions import WORSE, compare_pass_rate

DAY, HOUR = 86400.0, 3600.0
# segment -> (targets per day, true pass rate)
SEGMENTS = {"search": (10_000, 0.92), "checkout": (2_000, 0.85), "billing": (800, 0.95),
            "refunds": (300, 0.80)}  # fmt: skip
REGRESSED = "search"
BAD_RATE = 0.85
DEPLOY_DAY = 2
OLD, NEW = "1.4.0", "1.5.0"
COLD_RATE, RISK_RATE = 0.05, 0.25


def add(s: SegmentSums, passed: int, weight: float, at: float) -> None:
    """One verdict into ``s``, as the store's summary sums count it."""
    s.scored += 1
    s.add_result(weight, passed)
    s.first_at = min(s.first_at, at)
    s.last_at = max(s.last_at, at)


class SimStore:
    """The two queries the allocation makes, over the simulated results (hourly buckets)."""

    def __init__(self) -> None:
        self.hours: dict[int, dict[str, SegmentSums]] = {}
        self.versions: dict[str, SegmentSums] = {}

    def add(self, segment: str, version: str, passed: int, weight: float, at: float) -> None:
        bucket = self.hours.setdefault(int(at // HOUR), {})
        add(bucket.setdefault(segment, SegmentSums()), passed, weight, at)
        add(self.versions.setdefault(version, SegmentSums()), passed, weight, at)

    def summary_sums(self, *, by: str | None = None, since: float | None = None,
                     until: float | None = None, rule: str | None = None,
                     ) -> Mapping[tuple[str, str, str], SegmentSums]:  # fmt: skip
        if by == "service.version":
            return {(rule or "", "faithfulness", v): s for v, s in self.versions.items()}
        out: dict[tuple[str, str, str], SegmentSums] = {}
        first = int((since or 0.0) // HOUR)
        for hour, bucket in self.hours.items():
            if hour >= first:
                for segment, s in bucket.items():
                    out.setdefault((rule or "", "faithfulness", segment), SegmentSums()).add(s)
        return out

    def results_cost_since(self, *, rule: str, since: float) -> float:
        return 0.0


@dataclass
class Sampler:
    name: str
    rule: Rule
    fixed: float | None = None  # a fixed rate; None: the allocation's
    allocation: Allocation | None = None
    store: SimStore = field(default_factory=SimStore)
    daily: dict[tuple[int, str], SegmentSums] = field(default_factory=dict)
    by_version: dict[str, SegmentSums] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    flagged_after: int | None = None  # evaluations of the new version until "worse"
    alarm_day: int | None = None  # null runs: the first day a decision was made
    new_evaluations: int = 0

    def probabilities(self, now: float) -> tuple[Mapping[str, float], Mapping[str, float]]:
        if self.allocation is None:
            return {}, {}
        state = self.allocation.state(self.rule, now)
        return state.probabilities, state.versions_first_seen


def version_span(version: str, at: float) -> tuple[Target, list[SpanRecord]]:
    span = SpanRecord("0" * 32, "0" * 16, "chat", int(at * 1e9), int(at * 1e9) + 1,
                      resource={"service.name": REGRESSED, "service.version": version})  # fmt: skip
    target = Target("llm", span.span_id, span.trace_id, span.span_id, None, span,
                    REGRESSED, span.end_time_unix_nano)  # fmt: skip
    return target, [span]


def run_once(
    run: int, days: int, regression: bool, half_width: float, fixed_rate: float
) -> list[Sampler]:
    rng = random.Random(run)
    metric = FaithfulnessMetric(model="stub")
    budget_rule = Rule(metric, name=f"budget-{run}", sample_rate=COLD_RATE,
                       target_half_width=half_width, risk_sample_rate=RISK_RATE)  # fmt: skip
    samplers = [
        Sampler("budget", budget_rule),
        Sampler(
            "fixed", Rule(metric, name=f"fixed-{run}", sample_rate=fixed_rate), fixed=fixed_rate
        ),
    ]
    samplers[0].allocation = Allocation(samplers[0].store, refresh_seconds=HOUR)
    for day in range(days):
        for hour in range(24):
            start = day * DAY + hour * HOUR + 1.0
            version = NEW if day >= DEPLOY_DAY else OLD
            states = [s.probabilities(start) for s in samplers]
            risky = [
                bool(
                    risk_signals(
                        *version_span(version, start), first_seen=seen, labelled_fail=False
                    )
                )
                for _probs, seen in states
            ]
            for segment, (per_day, truth) in SEGMENTS.items():
                if segment == REGRESSED and regression and day >= DEPLOY_DAY:
                    truth = BAD_RATE
                count = per_day // 24 + (1 if hour < per_day % 24 else 0)
                for i in range(count):
                    target_id = f"{day}-{hour}-{segment}-{i}"
                    passed = 1 if rng.random() < truth else 0
                    at = start + i * HOUR / max(count, 1)
                    for sampler, (probs, _seen), risk in zip(samplers, states, risky, strict=True):
                        p = (
                            sampler.fixed
                            if sampler.fixed is not None
                            else probs.get(segment, COLD_RATE)
                        )
                        if risk and segment == REGRESSED and sampler.fixed is None:
                            p = max(p, RISK_RATE)
                        if not is_sampled(sampler.rule.name, target_id, p):
                            continue
                        record(
                            sampler,
                            day,
                            segment,
                            version if segment == REGRESSED else "-",
                            passed,
                            1 / p,
                            at,
                        )
    return samplers


def record(
    sampler: Sampler, day: int, segment: str, version: str, passed: int, weight: float, at: float
) -> None:
    sampler.store.add(segment, version, passed, weight, at)
    add(sampler.daily.setdefault((day, segment), SegmentSums()), passed, weight, at)
    sampler.calls[day] = sampler.calls.get(day, 0) + 1
    if segment != REGRESSED:
        return
    add(sampler.by_version.setdefault(version, SegmentSums()), passed, weight, at)
    if version != NEW:
        return
    sampler.new_evaluations += 1
    if sampler.flagged_after is not None or sampler.alarm_day is not None:
        return
    effect = compare_pass_rate(sampler.by_version.get(OLD, SegmentSums()), sampler.by_version[NEW])
    if effect.decision == WORSE:
        sampler.flagged_after = sampler.new_evaluations
    if effect.decision in (WORSE, "better"):
        sampler.alarm_day = int(at // DAY)


def fixed_rate_for(half_width: float) -> float:
    """The fixed rate giving the smallest segment the target precision over a day."""
    per_day, truth = min(SEGMENTS.values())
    z = NormalDist().inv_cdf(0.975)
    return min(1.0, z * z * truth * (1 - truth) / half_width**2 / per_day)


def summarise(
    runs: list[tuple[bool, list[Sampler]]], days: int, regression_runs: int, null_runs: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for index, name in enumerate(("budget", "fixed")):
        per_segment: dict[str, Any] = {}
        for segment, (_per_day, truth0) in SEGMENTS.items():
            covered = total = 0
            widths: list[float] = []
            for regression, samplers in runs:
                sampler = samplers[index]
                for day in range(1, days):
                    truth = (
                        BAD_RATE
                        if (regression and segment == REGRESSED and day >= DEPLOY_DAY)
                        else truth0
                    )
                    estimate, _n = pass_rate(sampler.daily.get((day, segment), SegmentSums()))
                    total += 1
                    if estimate.low is None or estimate.high is None:
                        continue
                    covered += estimate.low <= truth <= estimate.high
                    widths.append((estimate.high - estimate.low) / 2)
            per_segment[segment] = {
                "coverage": round(covered / total, 4) if total else None,
                "intervals": total,
                "mean_half_width": round(statistics.fmean(widths), 4) if widths else None,
            }
        calls = [s[index].calls.get(d, 0) for _r, s in runs for d in range(1, days)]
        flagged = [s[index].flagged_after for r, s in runs if r]
        found = [f for f in flagged if f is not None]
        alarms = [s[index].alarm_day for r, s in runs if not r]
        out[name] = {
            "segments": per_segment,
            "judge_calls_per_day": round(statistics.fmean(calls), 1) if calls else 0,
            "regression_flagged_runs": f"{len(found)}/{regression_runs}",
            "evaluations_until_flagged_median": statistics.median(found) if found else None,
            "evaluations_until_flagged_max": max(found) if found else None,
            "false_alarm_runs": f"{sum(a is not None for a in alarms)}/{null_runs}",
            "false_alarms_per_day": round(
                sum(a is not None for a in alarms) / max(null_runs * (days - DEPLOY_DAY), 1), 5
            ),
        }
    return out


def llm_span(trace_id: int, service: str, at: float) -> SpanRecord:
    """An LLM call as our tracer writes it (the planner finds it as an ``llm`` target)."""
    text = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
    return SpanRecord(
        f"{trace_id:032x}", f"{trace_id:016x}", "chat stub", int(at * 1e9), int(at * 1e9) + 1,
        attributes={"gen_ai.operation.name": "chat", "spanjudge.kind": "llm",
                    "gen_ai.request.model": "stub", "gen_ai.input.messages": text,
                    "gen_ai.output.messages": text},
        resource={"service.name": service},
    )  # fmt: skip


def through_planner(days: int, half_width: float, scale: float) -> dict[str, Any]:
    """The same segments (traffic times ``scale``) through the real planner on a SQLite store:
    spans written, planned each hour, jobs claimed and completed by the stub judge, the
    allocation read from the store's own summary sums. Judge calls and the day's estimate per
    segment, and how many jobs recorded a probability other than the rule's rate."""
    from spanjudge._core.span_record import EvaluationRecord
    from spanjudge._store.sqlite import SQLiteStore
    from spanjudge.evaluators._plan.planner import Planner, TickReport

    rng = random.Random(7)
    rule = Rule(FaithfulnessMetric(model="stub"), name="faith", sample_rate=COLD_RATE,
                target_half_width=half_width, risk_sample_rate=0.0)  # fmt: skip
    out: dict[str, Any] = {"scale": scale, "days": days, "segments": {}}
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(f"sqlite:///{Path(tmp) / 'sim.db'}")
        planner = Planner({rule.name: rule}, store, clock=lambda: 0.0)
        truth: dict[str, tuple[str, int]] = {}
        daily: dict[tuple[int, str], SegmentSums] = {}
        allocated = ids = 0
        for day in range(days):
            for hour in range(24):
                at = day * DAY + hour * HOUR + 1.0
                spans = []
                for segment, (per_day, rate) in SEGMENTS.items():
                    for _ in range(round(per_day * scale / 24)):
                        ids += 1
                        spans.append(llm_span(ids, segment, at))
                        truth[f"{ids:016x}"] = (segment, 1 if rng.random() < rate else 0)
                store.write_spans(spans, now=at)
                planner.plan_traces([s.trace_id for s in spans], TickReport(), at + 60)
                for job in store.claim_jobs(
                    owner="b", limit=100_000, lease_seconds=60, now=at + 61
                ):
                    segment, passed = truth[job.target_id]
                    p = job.sample_rate or 1.0
                    allocated += p != COLD_RATE
                    record = EvaluationRecord(
                        rule="faith", metric="faithfulness", target_type="llm",
                        target_id=job.target_id, trace_id=job.trace_id, span_id=job.span_id,
                        score=float(passed), success=bool(passed), sample_rate=p,
                        service_name=segment, segments={"service": segment},
                        finished_at=at + 62,
                    )  # fmt: skip
                    store.complete_job(job.job_id, owner="b", record=record, now=at + 62)
                    add(daily.setdefault((day, segment), SegmentSums()), passed, 1 / p, at)
        store.close()
    for segment in SEGMENTS:
        last = daily.get((days - 1, segment), SegmentSums())
        estimate, _n = pass_rate(last)
        out["segments"][segment] = {
            "judge_calls_last_day": last.verdicts,
            "pass_rate_last_day": None if estimate.value is None else round(estimate.value, 4),
            "half_width_last_day": None
            if estimate.low is None or estimate.high is None
            else round((estimate.high - estimate.low) / 2, 4),
        }
    out["jobs_with_an_allocated_probability"] = allocated
    return out


# ------------------------------------------------------------------ the cells of issue 40
# Each cell draws the verdicts our own sampling design produces: strata of the traffic, each
# with its share of the targets, the probability it is sampled with and its pass rate. A
# verdict comes from stratum h with probability share_h * q_h / sum(share * q) and weighs
# 1 / q_h; the true pass rate is the traffic's, sum(share_h * rate_h) / sum(share).
# design -> [(share of the traffic, sampling probability, pass-rate drop)], the drop taken
# from the cell's pass rate p (risky targets fail more often)
DESIGNS: dict[str, list[tuple[float, float, float]]] = {
    "equal": [(1.0, 1.0, 0.0)],
    # the budget sampler alone: segments at the probabilities an allocation gives
    "budget": [(0.6, 0.02, 0.0), (0.3, 0.1, 0.0), (0.1, 0.5, 0.0)],
    # the budget sampler with risk boosts: 5% of the traffic risky, sampled at rate 1
    "budget_risk": [(0.57, 0.02, 0.0), (0.38, 0.1, 0.0), (0.05, 1.0, 0.3)],
    # 90% of the verdicts at a low rate beside a boosted 10%
    "mix_90_10": [(0.9 / 0.02, 0.02, 0.0), (0.1, 1.0, 0.3)],
}
# score distribution -> (share of scores at exactly 1.0; the rest uniform on [0, 1])
SCORES = {"bimodal": None, "ones_97": 0.97, "ones_995": 0.995}


def _strata(design: str, p: float) -> tuple[list[tuple[float, float, float]], float]:
    """(cumulative verdict share, weight, pass rate) per stratum, and the true pass rate."""
    strata = DESIGNS[design]
    mass = sum(share * q for share, q, _drop in strata)
    out, total = [], 0.0
    for share, q, drop in strata:
        total += share * q / mass
        out.append((total, 1 / q, max(0.0, p - drop)))
    truth = sum(share * max(0.0, p - drop) for share, _q, drop in strata)
    return out, truth / sum(share for share, _q, _drop in strata)


def _draw(rng: random.Random, strata: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(weight, pass rate) of one verdict's stratum."""
    u = rng.random()
    for top, weight, rate in strata:
        if u < top:
            return weight, rate
    return strata[-1][1], strata[-1][2]


def _add_verdict(s: SegmentSums, weight: float, passed: int, score: float | None = None) -> None:
    """One scored verdict (its score: the verdict itself unless given) into ``s``."""
    s.scored += 1
    s.add_result(weight, passed, float(passed) if score is None else score)


def _verdict_sums(
    rng: random.Random, strata: list[tuple[float, float, float]], n: int, ones: float | None
) -> SegmentSums:
    """``n`` verdicts (and scores: the verdict itself, or a score piled at 1.0) summed as the
    store sums them."""
    s = SegmentSums()
    for _ in range(n):
        weight, rate = _draw(rng, strata)
        passed = 1 if rng.random() < rate else 0
        score = float(passed) if ones is None else 1.0 if rng.random() < ones else rng.random()
        _add_verdict(s, weight, passed, score)
    return s


def _interval_cell(rng: random.Random, design: str, p: float, n: int, replicates: int,
                   scores: str | None) -> dict[str, Any]:  # fmt: skip
    strata, truth = _strata(design, p)
    ones = SCORES[scores] if scores is not None else None
    if ones is not None:  # 1.0 with probability `ones`, else uniform on [0, 1]
        truth = ones + (1 - ones) / 2
        strata = [(top, weight, 1.0) for top, weight, _rate in strata]
    covered = zero = missing = 0
    widths: list[float] = []
    n_eff_over_kish = 0
    for _ in range(replicates):
        s = _verdict_sums(rng, strata, n, ones)
        if scores is None:
            estimate, n_eff = pass_rate(s)
            kish = s.pass_weight**2 / s.pass_weight2
            n_eff_over_kish += n_eff > kish * (1 + 1e-9)
        else:
            estimate, _variance = mean_interval(s)
        if estimate.low is None or estimate.high is None:
            missing += 1
            continue
        covered += estimate.low <= truth <= estimate.high
        zero += estimate.high - estimate.low <= 1e-12
        widths.append((estimate.high - estimate.low) / 2)
    cell: dict[str, Any] = {
        "design": design, "n": n, "truth": round(truth, 4), "replicates": replicates,
        "coverage": round(covered / replicates, 4), "zero_width": zero, "no_interval": missing,
        "mean_half_width": round(statistics.fmean(widths), 4) if widths else None,
    }  # fmt: skip
    if scores is None:
        cell["p"] = p
        cell["n_eff_above_kish"] = round(n_eff_over_kish / replicates, 4)
    else:
        cell["scores"] = scores
    return cell


def interval_cells(replicates: int, sizes: tuple[int, ...]) -> dict[str, list[dict[str, Any]]]:
    """Coverage of the 95% pass-rate and mean-score intervals per design, n and p (or score
    distribution); replicates a cell, a quarter of them at n = 1000."""
    rng = random.Random(40)
    rates, means = [], []
    for design in DESIGNS:
        for n in sizes:
            reps = replicates if n < 1000 else max(replicates // 4, 1)
            for p in (0.5, 0.9, 0.99):
                rates.append(_interval_cell(rng, design, p, n, reps, None))
            if design in ("equal", "budget_risk"):
                for scores in SCORES:
                    if scores != "bimodal":
                        means.append(_interval_cell(rng, design, 0.5, n, reps, scores))
                    else:  # pass/fail scores at p = 0.9
                        means.append(_interval_cell(rng, design, 0.9, n, reps, "bimodal"))
    return {"pass_rate": rates, "mean_score": means}


SEQUENTIAL = {
    # cell -> (weight design, pass rate, baseline verdicts at the start, baseline grows)
    "equal_weights": ("equal", 0.5, 400, False),
    "budget_risk_p0.5": ("budget_risk", 0.5, 400, False),
    "budget_risk_growing_p0.5": ("budget_risk", 0.5, 20, True),
    "budget_risk_growing_p0.9": ("budget_risk", 0.9, 20, True),
    "mix_90_10_growing_p0.5": ("mix_90_10", 0.5, 20, True),
}


def sequential_cells(runs: int, horizon: int) -> dict[str, dict[str, Any]]:
    """False alarms of the regression test under "no difference": baseline and candidate
    drawn from the same design, the test looked at after every candidate verdict (and, with a
    growing baseline, one baseline verdict beside each), ``horizon`` candidate verdicts."""
    out = {}
    for cell, (design, p, start, grows) in SEQUENTIAL.items():
        rng = random.Random(zlib.crc32(cell.encode()))
        strata, _truth = _strata(design, p)
        alarms: list[int] = []
        for _ in range(runs):
            base, cand = SegmentSums(), SegmentSums()
            for _ in range(start):
                weight, rate = _draw(rng, strata)
                _add_verdict(base, weight, 1 if rng.random() < rate else 0)
            for step in range(1, horizon + 1):
                weight, rate = _draw(rng, strata)
                _add_verdict(cand, weight, 1 if rng.random() < rate else 0)
                if grows:
                    weight, rate = _draw(rng, strata)
                    _add_verdict(base, weight, 1 if rng.random() < rate else 0)
                decision = compare_pass_rate(base, cand).decision
                if decision in (WORSE, "better"):
                    alarms.append(step)
                    break
        out[cell] = {
            "design": design, "p": p, "baseline_start": start, "baseline_grows": grows,
            "runs": runs, "looks": horizon, "false_alarms": round(len(alarms) / runs, 4),
            "alarm_at_median": statistics.median(alarms) if alarms else None,
        }  # fmt: skip
    return out


# traffic cells: segment -> (targets a day, pass rate); risky (error) traces fail more often
TRAFFIC = {"busy": (5000, 0.9), "mid": (500, 0.85), "small": (100, 0.8), "tiny": (5, 0.8)}
RISKY_SHARE, RISKY_RATE = 0.03, 0.5
TRAFFIC_CELLS = {
    # cell -> (budget per day, risk_sample_rate, deploy day or None)
    "budget_alone": (300.0, 0.0, None),
    "risk_beside_budget": (600.0, 1.0, None),
    "deploy_day": (600.0, 1.0, 2),
}


def _traffic_span(
    segment: str, version: str, at: float, error: bool, i: int
) -> tuple[Target, list[SpanRecord]]:
    span = SpanRecord(f"{i:032x}", f"{i:016x}", "chat", int(at * 1e9), int(at * 1e9) + 1,
                      resource={"service.name": segment, "service.version": version},
                      status_code="ERROR" if error else "UNSET")  # fmt: skip
    target = Target("llm", span.span_id, span.trace_id, span.span_id, None, span, segment,
                    span.end_time_unix_nano)  # fmt: skip
    return target, [span]


def _admission(rule: Rule) -> Any:
    """The planner's budget for ``rule`` (its hard daily cap where the planner has one)."""
    from spanjudge.evaluators._plan import sampler

    try:
        return sampler.Budget(max_per_day=rule.budget_per_day)  # type: ignore[call-arg]
    except TypeError:  # a planner without a daily cap of evaluations
        return sampler.Budget()


def _reported_short(allocation: Allocation, rule: Rule, now: float) -> set[str]:
    """The segments the allocation reports as unable to reach the target precision."""
    state = allocation.state(rule, now)
    return set(getattr(state, "short", {}) or {})


def traffic_cell(cell: str, runs: int, days: int) -> dict[str, Any]:
    """Days of traffic through the real allocation, risk signals and the planner's budget:
    judge calls a day against the budget, and per segment the daily interval's coverage, the
    days without a verdict and the days the segment was reported under-covered."""
    budget, risk_rate, deploy = TRAFFIC_CELLS[cell]
    calls: list[int] = []
    per_segment = {k: {"covered": 0, "intervals": 0, "no_verdict": 0, "reported": 0, "verdicts": 0}
                   for k in TRAFFIC}  # fmt: skip
    ids = 0
    for run in range(runs):
        rng = random.Random(1000 + run)
        metric = FaithfulnessMetric(model="stub")
        rule = Rule(metric, name=f"{cell}-{run}", sample_rate=COLD_RATE, budget_per_day=budget,
                    target_half_width=0.05, risk_sample_rate=risk_rate)  # fmt: skip
        store = SimStore()
        allocation = Allocation(store, refresh_seconds=HOUR)
        admission = _admission(rule)
        for day in range(days):
            daily: dict[str, SegmentSums] = {k: SegmentSums() for k in TRAFFIC}
            made = 0
            for hour in range(24):
                start = day * DAY + hour * HOUR + 1.0
                for segment, (per_day, truth) in TRAFFIC.items():
                    version = (
                        "2.0"
                        if deploy is not None and day >= deploy and segment == "busy"
                        else "1.0"
                    )
                    count = per_day // 24 + (1 if hour < per_day % 24 else 0)
                    for i in range(count):
                        ids += 1
                        at = start + i * HOUR / max(count, 1)
                        error = rng.random() < RISKY_SHARE
                        passed = 1 if rng.random() < (RISKY_RATE if error else truth) else 0
                        target, spans = _traffic_span(segment, version, at, error, ids)
                        p = allocation.probability(rule, target, spans, at)
                        if not is_sampled(rule.name, target.target_id, p):
                            continue
                        if admission.allow(at) is not None:
                            continue
                        made += 1
                        store.add(segment, version, passed, 1 / p, at)
                        add(daily[segment], passed, 1 / p, at)
            calls.append(made)
            if day == 0:
                continue  # the cold start: no allocation yet
            short = _reported_short(allocation, rule, day * DAY + DAY - 1.0)
            for segment, (_per_day, truth) in TRAFFIC.items():
                row = per_segment[segment]
                true_rate = (1 - RISKY_SHARE) * truth + RISKY_SHARE * RISKY_RATE
                estimate, _n = pass_rate(daily[segment])
                row["intervals"] += 1
                row["verdicts"] += daily[segment].verdicts
                row["reported"] += segment in short
                if estimate.low is None or estimate.high is None:
                    row["no_verdict"] += 1
                    continue
                row["covered"] += estimate.low <= true_rate <= estimate.high
    segments = {}
    for segment, row in per_segment.items():
        days_seen = max(row["intervals"], 1)
        segments[segment] = {
            "per_day": TRAFFIC[segment][0],
            "mean_verdicts_per_day": round(row["verdicts"] / days_seen, 1),
            "coverage": round(row["covered"] / days_seen, 4),
            "days_without_a_verdict": round(row["no_verdict"] / days_seen, 4),
            "days_reported_under_covered": round(row["reported"] / days_seen, 4),
        }
    return {
        "budget_per_day": budget, "risk_sample_rate": risk_rate, "deploy_day": deploy,
        "runs": runs, "days": days, "calls_per_day_mean": round(statistics.fmean(calls), 1),
        "calls_per_day_max": max(calls), "days_over_budget": sum(c > budget for c in calls),
        "deploy_day_calls_max": None if deploy is None
        else max(calls[d] for d in range(deploy, len(calls), days)),
        "segments": segments,
    }  # fmt: skip


def fold_cell() -> dict[str, Any]:
    """A real segment named ``other`` among 14 segments folded to a cap of 4: is it kept apart
    from the folded rest, and are the caller's sums left as they were?"""
    from spanjudge.evaluators._review.estimates import OTHER, fold_segments, summarize

    rng = random.Random(4)
    sums: dict[tuple[str, str, str], SegmentSums] = {}
    for i, name in enumerate([OTHER] + [f"seg{i}" for i in range(13)]):
        s = SegmentSums()
        for _ in range(400 - 20 * i if name != OTHER else 422):
            add(s, 1 if rng.random() < (0.445 if name == OTHER else 0.5) else 0, 1.0, 0.0)
        sums[("r", "m", name)] = s
    before = {k: (s.verdicts, s.passed_weight) for k, s in sums.items()}
    kept, folded = fold_segments(sums, 4)
    rows = summarize(kept, by="k", folded=folded)
    real = [r for r in rows if r.segment == OTHER]
    return {
        "real_other_verdicts": 422,
        "row_named_other_verdicts": real[0].verdicts if real else None,
        "row_named_other_folded": real[0].folded if real else None,
        "input_mutated": before != {k: (s.verdicts, s.passed_weight) for k, s in sums.items()},
    }


def done_when(cells: dict[str, Any]) -> dict[str, Any]:
    """The issue's checks over every cell: coverage >= 93% where n >= 30, no zero-width
    interval, false alarms <= 5%, judge calls <= the budget every day."""
    intervals = cells["intervals"]["pass_rate"] + cells["intervals"]["mean_score"]
    checked = [c for c in intervals if c["n"] >= 30]
    low = min(checked, key=lambda c: c["coverage"]) if checked else None
    alarms = max(cells["sequential"].values(), key=lambda c: c["false_alarms"])
    traffic = cells["traffic"].values()
    return {
        "lowest_coverage_n_ge_30": low
        and {k: low.get(k) for k in ("design", "n", "p", "scores", "coverage")},
        "zero_width_intervals": sum(c["zero_width"] for c in intervals),
        "highest_false_alarms": alarms["false_alarms"],
        "days_over_budget": sum(c["days_over_budget"] for c in traffic),
        "met": bool(
            low is not None and low["coverage"] >= 0.93
            and sum(c["zero_width"] for c in intervals) == 0
            and alarms["false_alarms"] <= 0.05
            and sum(c["days_over_budget"] for c in traffic) == 0
        ),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100, help="runs, half with the regression")
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--half-width", type=float, default=0.05)
    parser.add_argument("--replicates", type=int, default=4000, help="per interval cell")
    parser.add_argument("--sequential-runs", type=int, default=1000, help="per sequential cell")
    parser.add_argument("--looks", type=int, default=300, help="candidate verdicts a run")
    parser.add_argument("--traffic-runs", type=int, default=12, help="per traffic cell")
    parser.add_argument("--smoke", action="store_true", help="a few runs of each part")
    parser.add_argument("--only-cells", action="store_true", help="skip the budget/fixed runs")
    args = parser.parse_args(argv)
    # the allocation's "cannot reach the target" WARNINGs are counted in the cells instead
    logging.getLogger("spanjudge.allocation").setLevel(logging.ERROR)
    runs, days = (6, 3) if args.smoke else (args.runs, args.days)
    if args.smoke:
        args.replicates, args.sequential_runs, args.looks, args.traffic_runs = 40, 10, 60, 1
    cells = {
        "intervals": interval_cells(
            args.replicates, (10, 30, 100) if args.smoke else (10, 30, 100, 1000)
        ),
        "sequential": sequential_cells(args.sequential_runs, args.looks),
        "traffic": {
            cell: traffic_cell(cell, args.traffic_runs, 3 if args.smoke else 5)
            for cell in TRAFFIC_CELLS
        },
        "fold": fold_cell(),
    }  # fmt: skip
    cells["done_when"] = done_when(cells)
    if args.only_cells:
        print(json.dumps({"benchmark": "sampling", "cells": cells}, indent=2))
        return 0
    fixed = fixed_rate_for(args.half_width)
    done = []
    for run in range(runs):
        regression = run % 2 == 0
        done.append((regression, run_once(run, days, regression, args.half_width, fixed)))
    regression_runs = sum(1 for r, _s in done if r)
    result = summarise(done, days, regression_runs, runs - regression_runs)
    budget, fixed_calls = (
        result["budget"]["judge_calls_per_day"],
        result["fixed"]["judge_calls_per_day"],
    )
    doc = {
        "benchmark": "sampling",
        "runs": runs,
        "days": days,
        "segments": {k: {"per_day": n, "pass_rate": p} for k, (n, p) in SEGMENTS.items()},
        "regression": {
            "segment": REGRESSED,
            "from": OLD,
            "to": NEW,
            "pass_rate": BAD_RATE,
            "at_day": DEPLOY_DAY,
        },
        "target_half_width": args.half_width,
        "fixed_rate": round(fixed, 4),
        "judge": "stub answering from the planted truth (no HTTP)",
        # the test's stated error rate: at most this share of null runs may ever alarm
        "false_alarm_rate_stated": 0.05,
        "samplers": result,
        "budget_over_fixed_calls": round(budget / fixed_calls, 4) if fixed_calls else None,
        "through_planner": through_planner(2, args.half_width, 0.05 if args.smoke else 1.0),
        "cells": cells,
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
