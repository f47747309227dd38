"""Rules that sample by trace or by conversation: which jobs planning makes, what a Collector
may drop (upstream_rate), and the settings that configure them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from spanjudge._core.span_record import FeedbackRecord
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._plan.consistent import keeps, key_kept
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import (
    is_sampled,
    presample_blockers,
    upstream_rate,
)
from spanjudge.settings import load_settings
from spanjudge.worker.rule_config import build_rules
from tests.evaluators.online.spans import Trace

NOW = 1_000_000.0
_rng = random.Random(31)


def faith(name: str, target: str = "llm", **kwargs: Any) -> Rule:
    return Rule(FaithfulnessMetric(model="gpt-4o-mini"), target=target, name=name, **kwargs)  # type: ignore[arg-type]


def w3c_trace(conversation: str | None = None) -> Trace:
    """An agent turn (carrying the conversation id, if any) with one model call under it, on a
    random W3C trace id."""
    trace = Trace("shop", trace_id=f"{_rng.getrandbits(128):032x}")
    root = trace.agent(conversation_id=conversation)
    trace.llm(parent=root)
    return trace


def planned(rules: list[Rule], traces: list[Trace], tmp_path: Path) -> dict[str, set[str]]:
    """rule name -> trace ids it made a job in."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        for trace in traces:
            store.write_spans(trace.spans, now=NOW - 100)
        planner = Planner({r.name: r for r in rules}, store, clock=lambda: NOW)
        planner.plan_traces([t.trace_id for t in traces], TickReport(), NOW)
        jobs = store.claim_jobs(owner="t", limit=100_000, lease_seconds=60, now=NOW)
    finally:
        store.close()
    out: dict[str, set[str]] = {r.name: set() for r in rules}
    for job in jobs:
        assert job.trace_id is not None
        out[job.rule].add(job.trace_id)
    return out


def test_trace_sampled_rules_pick_the_traces_opentelemetry_keeps(tmp_path: Path) -> None:
    traces = [w3c_trace() for _ in range(400)]
    rules = [
        faith("llm-by-trace", sample_rate=0.3, sample_by="trace"),
        faith("root-by-trace", target="trace", sample_rate=0.1, sample_by="trace"),
        faith("agent-by-trace", target="agent", sample_rate=0.3, sample_by="trace"),
        faith("llm-by-target", sample_rate=0.3),
    ]
    jobs = planned(rules, traces, tmp_path)
    ids = [t.trace_id for t in traces]
    assert jobs["llm-by-trace"] == {t for t in ids if keeps(t, 0.3)}
    assert jobs["root-by-trace"] == {t for t in ids if keeps(t, 0.1)}
    # every rule sampling by trace at the same rate picks the same traces, whatever its target;
    # a lower rate picks a subset: what a 10% Collector keeps holds everything the 10% rule needs
    assert jobs["agent-by-trace"] == jobs["llm-by-trace"]
    assert jobs["root-by-trace"] < jobs["llm-by-trace"]
    # the per-target hash stays the default, and decides otherwise
    by_target = {t.trace_id for t in traces if is_sampled("llm-by-target", t.spans[1].span_id, 0.3)}
    assert jobs["llm-by-target"] == by_target != jobs["llm-by-trace"]
    assert 80 < len(jobs["llm-by-trace"]) < 160


def test_conversation_sampled_rules_keep_whole_conversations(tmp_path: Path) -> None:
    conversations = [f"conv-{i}" for i in range(60)]
    traces = [w3c_trace(conversations[i % 60]) for i in range(240)]  # 4 turns each
    alone = [w3c_trace() for _ in range(60)]  # no conversation: decided by the trace
    rules = [faith("llm-by-conversation", sample_rate=0.4, sample_by="conversation")]
    jobs = planned(rules, traces + alone, tmp_path)["llm-by-conversation"]
    kept = {c for c in conversations if key_kept(c, 0.4)}
    # the model call carries no id: its agent turn's conversation decides, for every turn
    want = {t.trace_id for i, t in enumerate(traces) if conversations[i % 60] in kept}
    want |= {t.trace_id for t in alone if keeps(t.trace_id, 0.4)}
    assert jobs == want
    assert 10 < len(kept) < 40


def test_conversation_target_rules_sample_by_conversation(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'c.db'}")
    conversations = [f"chat-{i}" for i in range(80)]
    try:
        for cid in conversations:
            store.write_spans(w3c_trace(cid).spans, now=NOW - 100)
        metric = TopicAdherenceMetric(relevant_topics=["orders"], model="gpt-4o-mini")
        rule = Rule(metric, target="conversation", sample_rate=0.5, sample_by="conversation")
        planner = Planner({rule.name: rule}, store, clock=lambda: NOW)
        report = TickReport()
        planner.plan_conversations(conversations, report, NOW)
        jobs = store.claim_jobs(owner="t", limit=1000, lease_seconds=60, now=NOW)
    finally:
        store.close()
    assert {j.target_id for j in jobs} == {c for c in conversations if key_kept(c, 0.5)}
    assert report.skipped["not_sampled"] == 80 - len(jobs)


def test_late_fail_labels_replan_with_the_rules_sampling(tmp_path: Path) -> None:
    from spanjudge.evaluators._plan.allocation import AllocationState
    from spanjudge.evaluators._plan.labels import LabelWatch

    store = SQLiteStore(f"sqlite:///{tmp_path / 'l.db'}")
    traces = [w3c_trace() for _ in range(40)]
    rule = faith("by-trace", sample_rate=0.0, sample_by="trace", target_half_width=0.05)
    try:
        planner = Planner({rule.name: rule}, store, clock=lambda: NOW)
        planner.allocation.set_state(rule, AllocationState({"shop": 1e-9}, computed_at=NOW))
        for trace in traces:
            store.write_spans(trace.spans, now=NOW - 100)
        report = TickReport()
        planner.plan_traces([t.trace_id for t in traces], report, NOW)
        assert report.jobs_enqueued == 0
        watch = LabelWatch(planner, since=NOW)
        labelled = [FeedbackRecord(metric="faithfulness", label="fail", trace_id=t.trace_id)
                    for t in traces]  # fmt: skip
        store.add_feedback(labelled, now=NOW + 5)
        # a fail label is a risk signal: risk_sample_rate (1.0) keeps every labelled trace
        assert watch.tick(report, now=NOW + 10) == len(traces)
    finally:
        store.close()


def test_upstream_rate_is_the_highest_trace_rate_or_everything() -> None:
    by_trace = [
        faith("a", sample_rate=0.02, sample_by="trace"),
        faith("b", target="trace", sample_rate=0.05, sample_by="trace"),
    ]
    assert upstream_rate(by_trace) == 0.05
    assert presample_blockers(by_trace) == []
    mixed = [*by_trace, faith("c", sample_rate=0.01)]
    assert upstream_rate(mixed) == 1.0
    assert presample_blockers(mixed) == [("c", "samples by target, not by trace")]
    budgeted = [*by_trace, faith("d", sample_rate=0.01, sample_by="trace", budget_per_day=100)]
    assert upstream_rate(budgeted) == 1.0
    assert presample_blockers(budgeted)[0][0] == "d"
    assert "budget" in presample_blockers(budgeted)[0][1]
    conv = [*by_trace, faith("e", sample_rate=0.01, sample_by="conversation")]
    assert upstream_rate(conv) == 1.0 and presample_blockers(conv)[0][0] == "e"
    assert upstream_rate([]) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sample_by": "span"}, "Rule.sample_by: Input should be 'target', 'trace' or"),
        ({"sample_by": None}, "Rule.sample_by: Input should be"),
    ],
)
def test_bad_sample_by_is_refused_naming_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        faith("x", **kwargs)


def test_a_conversation_rule_cannot_sample_by_trace() -> None:
    metric = TopicAdherenceMetric(relevant_topics=["orders"], model="gpt-4o-mini")
    with pytest.raises(ValueError, match=r"Rule\.sample_by: .*a conversation spans several"):
        Rule(metric, target="conversation", sample_by="trace")


def test_sample_by_in_the_worker_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPANJUDGE_STORE_URL", raising=False)
    path = tmp_path / "w.toml"
    path.write_text(
        '[[rules]]\nmetric = "faithfulness"\ntarget = "llm"\nsample_rate = 0.02\n'
        'sample_by = "trace"\n'
    )
    from spanjudge.evaluators._review.explain import OfflineJudge

    rules = build_rules(load_settings(path), OfflineJudge("gpt-4o-mini"))
    assert [(r.sample_by, r.sample_rate) for r in rules] == [("trace", 0.02)]
    path.write_text('[[rules]]\nmetric = "faithfulness"\nsample_by = "span"\n')
    with pytest.raises(ConfigError, match="sample_by"):
        load_settings(path)
    path.write_text(
        '[[rules]]\nmetric = "topic_adherence"\ntarget = "conversation"\nsample_by = "trace"\n'
        'params = {relevant_topics = ["orders"]}\n'
    )
    # refused as the file is read: the file's rules and Rule share the check
    with pytest.raises(ConfigError, match=r"rules\.0\.sample_by: .*a conversation spans"):
        load_settings(path)
