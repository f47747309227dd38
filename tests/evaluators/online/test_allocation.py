"""Budget and precision targets: per-segment probabilities, recorded on the jobs they sample.

A rule with a fixed ``sample_rate`` samples as before (the job records that rate); a rule with
``budget_per_day`` / ``target_half_width`` samples each segment with the probability the
allocation gives it, raises risky targets to ``risk_sample_rate``, and records what it used.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge._store.sqlite import SQLiteStore
from spanjudge._store.summaries import SegmentSums
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._plan.allocation import (
    MIN_PROBABILITY,
    Allocation,
    AllocationState,
    allocate,
)
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.risk import (
    ERROR,
    HUMAN_FAIL,
    LOW_RETRIEVAL,
    NEW_VERSION,
    risk_signals,
)
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import is_sampled
from tests.evaluators.online.spans import Trace

NOW = 10_000.0


def sums(n: int, traffic: float, rate: float) -> SegmentSums:
    """A segment with ``n`` verdicts standing for ``traffic`` targets, ``rate`` passing."""
    return SegmentSums(verdicts=n, pass_weight=traffic, passed_weight=traffic * rate)


def rule(name: str = "faith", **kwargs: Any) -> Rule:
    return Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="llm", name=name, **kwargs)


# ------------------------------------------------------------------ allocate()
def test_budget_gives_a_small_segment_a_larger_share_and_spends_the_budget() -> None:
    segments = {"big": sums(400, 100_000, 0.9), "small": sums(40, 500, 0.9)}
    probs = allocate(segments, per_day=1000)
    assert probs["small"] > probs["big"]
    expected_calls = 100_000 * probs["big"] + 500 * probs["small"]
    assert expected_calls == pytest.approx(1000)


def test_budget_spends_less_where_the_answer_is_known() -> None:
    # same traffic; one segment nearly always passes (low variance), the other is a coin flip
    segments = {"settled": sums(400, 10_000, 0.99), "uncertain": sums(400, 10_000, 0.5)}
    probs = allocate(segments, per_day=1000)
    assert probs["uncertain"] > 5 * probs["settled"]


def test_a_budget_covering_everything_samples_everything() -> None:
    probs = allocate({"a": sums(10, 50, 0.8), "b": sums(10, 80, 0.5)}, per_day=1000)
    assert probs == {"a": 1.0, "b": 1.0}


def test_precision_target_asks_z2_s2_over_h2_verdicts_per_segment() -> None:
    s = sums(1000, 100_000, 0.8)
    probs = allocate({"x": s}, half_width=0.02)
    shrunk = (0.8 * 1000 + 1) / 1002
    z = NormalDist().inv_cdf(0.975)
    need = z * z * shrunk * (1 - shrunk) / 0.02**2
    assert probs["x"] * 100_000 == pytest.approx(need)


def test_with_both_targets_the_lower_level_wins() -> None:
    segments = {"a": sums(400, 100_000, 0.8), "b": sums(400, 50_000, 0.7)}
    precise = allocate(segments, half_width=0.01)
    cheap = allocate(segments, per_day=500)
    both = allocate(segments, half_width=0.01, per_day=500)
    assert both == cheap
    assert allocate(segments, half_width=0.2, per_day=10**9) == allocate(segments, half_width=0.2)
    assert precise["a"] > cheap["a"]


def test_probabilities_stay_above_the_floor() -> None:
    probs = allocate({"huge": sums(10_000, 1e12, 0.999)}, per_day=1)
    assert probs["huge"] == MIN_PROBABILITY


# ------------------------------------------------------------------ risk signals
def test_risk_signals_read_from_the_trace() -> None:
    trace = Trace("shop")
    root = trace.agent()
    llm = trace.llm(parent=root)
    llm.resource["service.version"] = "2.0"
    assert (
        risk_signals(target_of(llm), trace.spans, first_seen={"2.0": -1e6}, labelled_fail=False)
        == ()
    )
    root.status_code = "ERROR"
    trace.retriever(["doc"], parent=root, **{"retrieval.documents.0.document.score": 0.1})
    found = risk_signals(target_of(llm), trace.spans, first_seen={}, labelled_fail=True)
    assert found == (HUMAN_FAIL, ERROR, NEW_VERSION, LOW_RETRIEVAL)


def target_of(span: Any) -> Any:
    from spanjudge.evaluators._rebuild.targets import Target

    return Target("llm", span.span_id, span.trace_id, span.span_id, None, span,
                  span.service_name, span.end_time_unix_nano)  # fmt: skip


# ------------------------------------------------------------------ the planner
def plan(
    store: SQLiteStore, rules: list[Rule], traces: list[Trace], state: AllocationState | None
) -> dict[str, float]:
    planner = Planner({r.name: r for r in rules}, store, clock=lambda: NOW)
    if state is not None:
        for r in rules:
            planner.allocation.set_state(r, state)
    for trace in traces:
        store.write_spans(trace.spans, now=NOW - 100)
    planner.plan_traces([t.trace_id for t in traces], TickReport(), NOW)
    jobs = store.claim_jobs(owner="t", limit=100_000, lease_seconds=60, now=NOW)
    return {f"{j.rule}/{j.target_id}": j.sample_rate for j in jobs}


def llm_traces(service: str, count: int) -> list[Trace]:
    out = []
    for _ in range(count):
        trace = Trace(service)
        trace.llm()
        out.append(trace)
    return out


def test_fixed_rate_rule_samples_and_records_as_before(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    traces = llm_traces("shop", 200)
    jobs = plan(store, [rule(sample_rate=0.3)], traces, None)
    want = {
        f"faith/{t.spans[0].span_id}"
        for t in traces
        if is_sampled("faith", t.spans[0].span_id, 0.3)
    }
    assert set(jobs) == want
    assert set(jobs.values()) == {0.3}
    store.close()


def test_budget_rule_samples_each_segment_at_its_probability_and_records_it(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    traces = llm_traces("shop", 300) + llm_traces("billing", 60)
    state = AllocationState({"shop": 0.1, "billing": 0.8}, computed_at=NOW)
    r = rule(budget_per_day=100, risk_sample_rate=0.0)
    jobs = plan(store, [r], traces, state)
    for trace in traces:
        span = trace.spans[0]
        p = 0.1 if trace.service == "shop" else 0.8
        key = f"faith/{span.span_id}"
        assert (key in jobs) == is_sampled("faith", span.span_id, p)
        if key in jobs:
            assert jobs[key] == p
    assert 10 < sum(1 for k in jobs if k) < 120
    store.close()


def test_a_segment_not_in_the_allocation_is_sampled_at_the_rules_rate(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    traces = llm_traces("new-service", 100)
    jobs = plan(store, [rule(sample_rate=0.5, budget_per_day=10, risk_sample_rate=0.0)], traces,
                AllocationState({"shop": 0.01}, computed_at=NOW))  # fmt: skip
    assert jobs and set(jobs.values()) == {0.5}
    store.close()


def test_error_and_fail_label_raise_a_target_to_the_risk_rate(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    failed, labelled, plain = llm_traces("shop", 3)
    failed.spans[0].status_code = "ERROR"
    store.add_feedback(
        [FeedbackRecord(metric="faithfulness", label="fail", trace_id=labelled.trace_id)], now=NOW
    )
    state = AllocationState({"shop": 1e-9}, computed_at=NOW)
    jobs = plan(store, [rule(target_half_width=0.05)], [failed, labelled, plain], state)
    assert jobs == {
        f"faith/{failed.spans[0].span_id}": 1.0,
        f"faith/{labelled.spans[0].span_id}": 1.0,
    }
    store.close()


def test_allocation_is_read_from_the_stores_sums_and_refreshed(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    r = rule(budget_per_day=50)
    records = []
    for i in range(400):
        service = "big" if i < 360 else "small"
        records.append(EvaluationRecord(
            rule="faith", metric="faithfulness", target_type="llm", target_id=f"t{i}",
            trace_id=f"{i:032x}", span_id=f"{i:016x}", status="scored", score=1.0,
            success=i % 10 != 0, sample_rate=0.1 if service == "big" else 1.0,
            service_name=service, segments={"service": service}, finished_at=NOW - 3600,
        ))  # fmt: skip
    write_results(store, records)
    allocation = Allocation(store, refresh_seconds=60)
    state = allocation.state(r, NOW)
    assert set(state.probabilities) == {"big", "small"}
    assert state.probabilities["small"] > state.probabilities["big"]
    assert allocation.state(r, NOW + 30) is state
    assert allocation.state(r, NOW + 61) is not state
    store.close()


def write_results(store: SQLiteStore, records: list[EvaluationRecord]) -> None:
    from spanjudge._store.models import JobSpec

    specs = [JobSpec(rule=r.rule, target_type="llm", target_id=r.target_id, trace_id=r.trace_id,
                     span_id=r.span_id, sample_rate=r.sample_rate) for r in records]  # fmt: skip
    store.enqueue_planned(specs, now=NOW - 3600)
    jobs = store.claim_jobs(owner="t", limit=100_000, lease_seconds=60, now=NOW - 3600)
    by_target = {r.target_id: r for r in records}
    for job in jobs:
        store.complete_job(job.job_id, owner="t", record=by_target[job.target_id], now=NOW - 3600)


# ------------------------------------------------------------------ configuration
def test_worker_rule_config_passes_targets_and_segment_keys() -> None:
    from spanjudge.rule_settings import RuleConfig
    from spanjudge.worker.rule_config import build_rule

    config = RuleConfig.model_validate({
        "metric": "faithfulness", "sample_rate": 0.05, "budget_per_day": 2000,
        "budget_cost_per_day": 3.5, "target_half_width": 0.05, "allocate_by": "model",
        "risk_sample_rate": 0.5, "segment_keys": ["tenant.tier"],
    })  # fmt: skip
    built = build_rule(config, judge="gpt-4o-mini", index=0)
    assert (built.budget_per_day, built.budget_cost_per_day, built.target_half_width) == (
        2000,
        3.5,
        0.05,
    )
    assert (built.allocate_by, built.risk_sample_rate, built.segment_keys) == (
        "model",
        0.5,
        ("tenant.tier",),
    )
    assert built.has_target and not rule().has_target


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"budget_per_day": 0}, "budget_per_day"),
        ({"budget_cost_per_day": math.inf}, "budget_cost_per_day"),
        ({"target_half_width": 0.7}, "target_half_width"),
        ({"risk_sample_rate": 2}, "risk_sample_rate"),
        ({"segment_keys": "tier"}, "segment_keys"),
    ],
)
def test_invalid_targets_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"Rule.{field}"):
        rule(**kwargs)


# ------------------------------------------------------------------ late labels
def test_a_late_fail_label_queues_the_target_its_rule_passed_over(tmp_path: Path) -> None:
    from spanjudge.evaluators._plan.labels import LabelWatch

    store = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    traces = llm_traces("shop", 20)
    target_rule = rule(target_half_width=0.05)
    fixed = rule("fixed", sample_rate=0.0)
    planner = Planner({r.name: r for r in (target_rule, fixed)}, store, clock=lambda: NOW)
    planner.allocation.set_state(target_rule, AllocationState({"shop": 1e-9}, computed_at=NOW))
    for trace in traces:
        store.write_spans(trace.spans, now=NOW - 100)
    report = TickReport()
    planner.plan_traces([t.trace_id for t in traces], report, NOW)
    assert report.jobs_enqueued == 0
    watch = LabelWatch(planner, since=NOW)
    late = traces[3]
    store.add_feedback(
        [FeedbackRecord(metric="faithfulness", label="fail", trace_id=late.trace_id),
         FeedbackRecord(metric="faithfulness", label="pass", trace_id=traces[4].trace_id)],
        now=NOW + 5,
    )  # fmt: skip
    assert watch.tick(report, now=NOW + 10) == 1
    assert watch.tick(report, now=NOW + 20) == 0  # each label is acted on once
    jobs = store.claim_jobs(owner="t", limit=100, lease_seconds=60, now=NOW + 30)
    assert [(j.rule, j.target_id, j.sample_rate) for j in jobs] == [
        ("faith", late.spans[0].span_id, 1.0)
    ]
    store.close()


def test_the_allocations_segment_value_is_the_one_the_result_carries() -> None:
    from spanjudge._store.summaries import UNSET
    from spanjudge.evaluators._plan.allocation import segment_value
    from spanjudge.evaluators._review.segments import result_segments

    trace = Trace("shop")
    root = trace.agent(name="support", **{"tenant.tier": "gold", "service": "override"})
    plain = trace.llm(parent=root, model="gpt-4o")
    plain.resource.update({"service.version": "1.5.0", "region": " eu ", "blank": " "})
    for span in (root, plain):
        target = target_of(span)
        for keys in ((), ("tenant.tier", "region", "service", "blank")):
            carried = result_segments(target, keys)
            for key in ("service", "service.version", "model", "agent", "tenant.tier",
                        "region", "blank", "absent"):  # fmt: skip
                assert segment_value(target, key, keys) == carried.get(key, UNSET), (key, keys)


def test_the_module_docstring_example_holds() -> None:
    big = SegmentSums(verdicts=100, pass_weight=10000.0, passed_weight=9500.0)
    small = SegmentSums(verdicts=50, pass_weight=50.0, passed_weight=40.0)
    probs = allocate({"big": big, "small": small}, per_day=200)
    assert probs == {"big": pytest.approx(0.015), "small": 1.0}
