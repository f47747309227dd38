"""Explain and enrich mode decide like the planner: a budget or precision rule samples with its
allocation's probability, not with its cold-start ``sample_rate`` (issue 29).

Each test picks targets the hash keeps at one probability and drops at the other, so the same
checks fail when ``rule.sample_rate`` is used instead of the allocation's probability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export import SpanExportResult

from spanjudge._store.sqlite import SQLiteStore
from spanjudge.evaluators._enrich.forwarder import Enricher
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._plan.allocation import Allocation, AllocationState
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import is_sampled
from spanjudge.evaluators._review.explain import explain_trace
from tests.evaluators.online.spans import Trace

NOW = 50_000.0
COLD, ALLOCATED = 0.02, 0.9  # the rule's own rate; the allocation's for "shop"


class NoBackend:
    """A span exporter that is never called in these tests."""

    def export(self, spans: Any) -> SpanExportResult:
        raise AssertionError("nothing is forwarded here")

    def shutdown(self) -> None:
        pass


def budget_rule(**kwargs: Any) -> Rule:
    # a budget the 200 traces stay well within: it is also the planner's daily cap
    kwargs = {"sample_rate": COLD, "budget_per_day": 10_000, "risk_sample_rate": 0.0, **kwargs}
    return Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="llm", name="faith", **kwargs)


def traces_telling_apart(count: int = 200) -> list[Trace]:
    """LLM traces of service "shop" whose span the hash keeps at one rate and not the other
    (both ways round present)."""
    out = []
    for _ in range(count):
        trace = Trace("shop")
        span = trace.llm()
        if is_sampled("faith", span.span_id, COLD) != is_sampled("faith", span.span_id, ALLOCATED):
            out.append(trace)
    assert len(out) > 20
    return out


def allocation_for(store: Any, rule: Rule, probability: float) -> Allocation:
    allocation = Allocation(store)
    allocation.set_state(rule, AllocationState({"shop": probability}, computed_at=NOW))
    return allocation


def planned(store: SQLiteStore, rule: Rule, traces: list[Trace], probability: float) -> set[str]:
    planner = Planner({rule.name: rule}, store, clock=lambda: NOW)
    planner.allocation.set_state(rule, AllocationState({"shop": probability}, computed_at=NOW))
    for trace in traces:
        store.write_spans(trace.spans, now=NOW - 100)
    planner.plan_traces([t.trace_id for t in traces], TickReport(), NOW)
    return {
        j.target_id for j in store.claim_jobs(owner="t", limit=10_000, lease_seconds=60, now=NOW)
    }


def test_explain_shows_the_allocations_probability_and_the_planners_decision(
    tmp_path: Path,
) -> None:
    rule = budget_rule()
    traces = traces_telling_apart()
    store = SQLiteStore(f"sqlite:///{tmp_path / 'p.db'}")
    jobs = planned(store, rule, traces, ALLOCATED)
    store.close()
    allocation = allocation_for(None, rule, ALLOCATED)
    for trace in traces:
        explanation = explain_trace(
            trace.trace_id, trace.spans, [rule], allocation=allocation, now=NOW
        )
        [verdict] = [v for line in explanation.spans for v in line.rules]
        assert verdict.sample_rate == ALLOCATED
        assert verdict.sampled == (trace.spans[0].span_id in jobs)


def test_explain_without_an_allocation_shows_the_cold_start_rate() -> None:
    rule = budget_rule()
    [trace] = traces_telling_apart()[:1]
    [verdict] = [
        v for line in explain_trace(trace.trace_id, trace.spans, [rule]).spans for v in line.rules
    ]
    assert verdict.sample_rate == COLD
    assert verdict.sampled == is_sampled("faith", trace.spans[0].span_id, COLD)


def test_a_fixed_rate_rule_is_explained_with_its_rate_even_given_an_allocation() -> None:
    rule = Rule(
        FaithfulnessMetric(model="gpt-4o-mini"), target="llm", name="faith", sample_rate=COLD
    )
    allocation = allocation_for(None, rule, ALLOCATED)
    for trace in traces_telling_apart()[:10]:
        explanation = explain_trace(
            trace.trace_id, trace.spans, [rule], allocation=allocation, now=NOW
        )
        [verdict] = [v for line in explanation.spans for v in line.rules]
        assert verdict.sample_rate == COLD


def test_the_enricher_holds_exactly_the_spans_the_planner_samples(tmp_path: Path) -> None:
    rule = budget_rule()
    traces = traces_telling_apart()  # each kept at ALLOCATED (0.9), none at COLD (0.02)
    store = SQLiteStore(f"sqlite:///{tmp_path / 'e.db'}")
    try:
        jobs = planned(store, rule, traces, ALLOCATED)
        assert jobs == {t.spans[0].span_id for t in traces}
        for probability in (ALLOCATED, 0.3):
            allocation = allocation_for(store, rule, probability)
            enricher = Enricher(
                [rule], store, NoBackend(), clock=lambda: NOW, allocation=allocation
            )
            held = {t.spans[0].span_id for t in traces if enricher.holds(t.spans[0])}
            kept = {
                s.span_id
                for t in traces
                for s in t.spans[:1]
                if is_sampled("faith", s.span_id, probability)
            }
            assert held == kept
            assert held  # the rule's own rate (0.02) would hold none of them
    finally:
        store.close()


def test_the_enricher_builds_its_own_allocation_for_a_target_rule(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'own.db'}")
    try:
        plain = Rule(
            FaithfulnessMetric(model="gpt-4o-mini"), target="llm", name="p", sample_rate=0.5
        )
        assert Enricher([plain], store, NoBackend()).allocation is None
        enricher = Enricher([budget_rule()], store, NoBackend(), clock=lambda: NOW)
        assert enricher.allocation is not None
        # an empty store: no segment allocated yet, so the cold-start rate decides
        trace = traces_telling_apart()[0]
        assert enricher.holds(trace.spans[0]) == is_sampled("faith", trace.spans[0].span_id, COLD)
    finally:
        store.close()


def test_a_risky_span_is_held_at_the_risk_rate(tmp_path: Path) -> None:
    rule = budget_rule(risk_sample_rate=1.0)
    store = SQLiteStore(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        allocation = allocation_for(store, rule, 1e-4)
        enricher = Enricher([rule], store, NoBackend(), clock=lambda: NOW, allocation=allocation)
        spans = [t.spans[0] for t in traces_telling_apart()]
        for span in spans:
            span.resource["service.version"] = "1.0"  # seen long ago: not a new version
        allocation.set_state(rule, AllocationState({"shop": 1e-4}, {"1.0": -1e6}, computed_at=NOW))
        assert not any(enricher.holds(s) for s in spans)
        for span in spans:
            span.status_code = "ERROR"
        assert all(enricher.holds(s) for s in spans)
    finally:
        store.close()


def test_the_explain_command_reads_the_allocation_from_its_store(tmp_path: Path) -> None:
    import json
    import math
    import time

    from click.testing import CliRunner

    from spanjudge._core.span_record import EvaluationRecord
    from spanjudge._store.models import JobSpec
    from spanjudge.cli.app import cli
    from tests.evaluators.online.test_explain import first_trace, recorded

    spans = recorded("openinference")
    trace_id = first_trace(spans)
    [llm] = [s for s in spans if s.trace_id == trace_id and s.name == "ChatCompletion"]
    database = tmp_path / "spans.db"
    store = SQLiteStore(str(database))
    store.write_spans(spans, now=1_000.0)
    # 30 results of this service, just now: what the allocation reads from the store
    now = time.time()
    batch = [
        EvaluationRecord(
            "faithfulness-llm", "faithfulness", "llm", f"t{i}", f"{i:032x}", f"{i:016x}",
            score=0.9, success=True, label="pass", sample_rate=1.0,
            service_name=llm.service_name, segments={"service": llm.service_name or ""},
        )
        for i in range(30)
    ]  # fmt: skip
    store.enqueue_jobs(
        [JobSpec(r.rule, "llm", r.target_id, r.trace_id, r.span_id) for r in batch], now=now
    )
    for job in store.claim_jobs(owner="w", limit=100, lease_seconds=60, now=now):
        record = next(r for r in batch if r.target_id == job.target_id)
        assert store.complete_job(job.job_id, owner="w", record=record, now=now)
    store.close()
    assert not is_sampled("faithfulness-llm", llm.span_id, 1e-4)
    config = tmp_path / "worker.toml"
    config.write_text(
        f"store_url = {json.dumps('sqlite:///' + str(database))}\n"
        'judge_model = "gpt-4o-mini"\n'
        '[[rules]]\nmetric = "faithfulness"\ntarget = "llm"\nsample_rate = 0.0001\n'
        "budget_per_day = 1000\nrisk_sample_rate = 0.0\n"
    )
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["explain", trace_id, "--config", str(config)]
    )
    assert result.exit_code == 0, result.output
    # the allocation's probability: 30 results within its 5-minute floor of a window are
    # 8,640 targets a day, and the budget buys 1,000 of them less the day's margin of two
    # standard deviations (2 sqrt(1000)); not the cold-start 1 in 10,000
    expected = (1000 - 2 * math.sqrt(1000)) / (30 * 86400 / 300)
    kept = is_sampled("faithfulness-llm", llm.span_id, expected)
    status = "would evaluate" if kept else f"not sampled (sample rate {expected:g})"
    assert f"rule faithfulness-llm (faithfulness on llm): {status}" in result.output
    assert "sample rate 0.0001" not in result.output
