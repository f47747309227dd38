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

    python benchmarks/sampling.py [--runs 400] [--days 4] [--half-width 0.05]
    python benchmarks/sampling.py --smoke     # 6 runs of 3 days; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
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
from spanjudge.evaluators._review.estimates import pass_rate
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
    s.verdicts += 1
    s.pass_weight += weight
    s.pass_weight2 += weight * weight
    s.passed_weight += weight * passed
    s.passed_weight2 += weight * weight * passed
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=400, help="runs, half with the regression")
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--half-width", type=float, default=0.05)
    parser.add_argument("--smoke", action="store_true", help="6 runs of 3 days")
    args = parser.parse_args(argv)
    runs, days = (6, 3) if args.smoke else (args.runs, args.days)
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
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
