"""Planning a page of traces at once plans exactly what planning each trace alone did.

The planner reads a chunk of traces' spans in one query, looks a target's conversation up only
once its sampler keeps it, counts unrecognised spans by asking which dialect matches, and writes
a page's jobs and marks in one transaction. None of that may change what is planned: on every
recorded interop fixture (each library's own spans and content log records), plus HTTP-only
traces no dialect reads, the jobs (every column), the skips, the coverage counts on the metrics
and the conversations planned equal those of :func:`reference`, the per-trace planning of the
previous release written out here.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from spanjudge._core import metric_names as names
from spanjudge._core.telemetry import Telemetry
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge._receive.logs import decode_logs
from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._plan import planner as planner_module
from spanjudge.evaluators._plan.coverage import Coverage, no_target_reason
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import is_sampled
from spanjudge.evaluators._rebuild.loading import load_conversation, load_trace
from spanjudge.evaluators._rebuild.targets import Target, conversation_target, find_targets
from tests.evaluators.online.spans import Trace
from tests.support.metrics import data_points

FIXTURES = Path(__file__).parents[2] / "interop" / "fixtures"
ARRIVED = 1_000.0
LATER = 2_000.0


def rules() -> list[Rule]:
    def llm(name: str, **kwargs: Any) -> Rule:
        return Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="llm", name=name, **kwargs)

    return [
        llm("llm-half", sample_rate=0.5),
        llm("llm-filtered", filter={"span_name": "chat *"}),
        Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="agent", name="agent-all"),
        Rule(
            FaithfulnessMetric(model="gpt-4o-mini"),
            target="trace",
            name="trace-half",
            sample_rate=0.5,
        ),
        Rule(
            TopicAdherenceMetric(relevant_topics=["returns"], model="gpt-4o-mini"),
            target="conversation",
            name="topics",
        ),
        Rule(
            TopicAdherenceMetric(relevant_topics=["returns"], model="gpt-4o-mini"),
            target="conversation",
            name="topics-filtered",
            filter={"service": "no-such-service"},
        ),
    ]


def http_traces() -> list[Trace]:
    """Traces no dialect reads (a health check and its database query), in two services."""
    out = []
    for service in ("shop", "billing"):
        http = Trace(service)
        root = http.span("GET /health", attributes={"http.method": "GET"})
        http.span("SELECT 1", root, attributes={"db.system": "sqlite"})
        out.append(http)
    return out


def fill(store: SpanStore, extra: list[Trace]) -> int:
    """Every recorded fixture's spans and content events, and ``extra``; how many traces."""
    traces: set[str] = set()
    for path in sorted(FIXTURES.glob("*/*.pb")):
        body = path.read_bytes()
        if path.name.endswith("-traces.pb"):
            spans = decode_traces(body, PROTOBUF)
            store.write_spans(spans, now=ARRIVED)
            traces.update(s.trace_id for s in spans)
        elif path.name.endswith("-logs.pb"):
            store.write_logs(decode_logs(body, PROTOBUF), now=ARRIVED)
    for trace in extra:
        store.write_spans(trace.spans, now=ARRIVED)
        traces.add(trace.trace_id)
    return len(traces)


def spec_of(rule: Rule, target: Target) -> tuple[Any, ...]:
    return (
        rule.name,
        target.target_type,
        target.target_id,
        target.trace_id,
        target.span_id,
        target.conversation_id,
        rule.sample_rate,
    )


def reference(
    store: SpanStore, all_rules: list[Rule], telemetry: Telemetry
) -> tuple[set[tuple[Any, ...]], Counter[str], int, int]:
    """The previous release's planning: every trace read and planned on its own."""
    jobs: set[tuple[Any, ...]] = set()
    skips: Counter[str] = Counter()
    coverage = Coverage(telemetry)
    span_rules = [r for r in all_rules if r.target != "conversation"]
    conv_rules = [r for r in all_rules if r.target == "conversation"]

    def admit(rule: Rule, target: Target) -> None:
        if is_sampled(rule.name, target.target_id, rule.sample_rate):
            jobs.add(spec_of(rule, target))
        else:
            skips["not_sampled"] += 1

    trace_ids = store.settled_traces(settle_seconds=10, now=LATER, limit=10_000)
    for trace_id in trace_ids:
        spans = load_trace(store, trace_id)
        reasons: list[tuple[Rule, str | None]] = []
        for rule in span_rules:
            targets = find_targets(rule, spans)
            for target in targets:
                admit(rule, target)
            every = targets
            if rule.filter is not None:
                every = find_targets(rule, spans, apply_filter=False)
                if len(every) > len(targets):
                    skips["filtered"] += len(every) - len(targets)
            reason = (
                None if targets else no_target_reason(rule, spans, found=targets, unfiltered=every)
            )
            reasons.append((rule, reason))
        reasons.extend((rule, no_target_reason(rule, spans)) for rule in conv_rules)
        coverage.trace(spans, reasons)
    coverage.flush()
    conversations = store.idle_conversations(idle_seconds=10, now=LATER, limit=10_000)
    for conversation_id in conversations:
        spans = load_conversation(store, conversation_id)
        conv = conversation_target(conversation_id, spans)
        for rule in conv_rules:
            if conv is None:
                coverage.conversation(rule, "no_turns", conversation_id, spans)
            elif rule.matches(conv):
                admit(rule, conv)
            else:
                skips["filtered"] += 1
                coverage.conversation(rule, "filtered", conversation_id, spans)
    coverage.flush()
    return jobs, skips, len(trace_ids), len(conversations)


def points(reader: InMemoryMetricReader) -> dict[tuple[Any, ...], float]:
    """Every counter point of the planner's coverage and skip metrics, by name and labels."""
    wanted = {names.PLANNER_UNRECOGNISED_SPANS, names.RULES_NO_TARGET}
    found: dict[tuple[Any, ...], float] = {}
    for name, p in data_points(reader):
        if name in wanted:
            found[(name, *sorted(p.attributes.items()))] = p.value
    return found


def stored_jobs(store: SpanStore) -> set[tuple[Any, ...]]:
    jobs = store.claim_jobs(owner="check", limit=100_000, lease_seconds=60, now=LATER)
    return {
        (
            j.rule,
            j.target_type,
            j.target_id,
            j.trace_id,
            j.span_id,
            j.conversation_id,
            j.sample_rate,
        )
        for j in jobs
    }


def test_page_planning_plans_what_per_trace_planning_did(tmp_path: Path, monkeypatch: Any) -> None:
    # small pages and chunks: several of each, and a chunk split across traces of one page
    monkeypatch.setattr(planner_module, "PAGE", 16)
    monkeypatch.setattr(planner_module, "LOAD_CHUNK", 5)
    expected_store = SQLiteStore(str(tmp_path / "reference.db"))
    store = SQLiteStore(str(tmp_path / "pages.db"))
    try:
        extra = http_traces()
        n = fill(expected_store, extra)
        assert fill(store, extra) == n and n > 16 * 2
        ref_reader, reader = InMemoryMetricReader(), InMemoryMetricReader()
        want_jobs, want_skips, want_traces, want_conversations = reference(
            expected_store, rules(), Telemetry(MeterProvider(metric_readers=[ref_reader]))
        )
        planner = Planner(
            {r.name: r for r in rules()},
            store,
            clock=lambda: LATER,
            telemetry=Telemetry(MeterProvider(metric_readers=[reader])),
        )
        report = TickReport()
        planner.plan(report, now=LATER, settle_seconds=10, idle_seconds=10)

        # the corpus exercises what it should: conversations, skips of both kinds, misses
        assert want_conversations > 0 and want_skips["not_sampled"] and want_skips["filtered"]
        assert any(job[5] for job in want_jobs if job[1] != "conversation")
        assert any(key[0] == names.PLANNER_UNRECOGNISED_SPANS for key in points(ref_reader))

        assert stored_jobs(store) == want_jobs
        assert report.jobs_enqueued == len(want_jobs)
        assert report.skipped == dict(want_skips)
        assert report.planned_traces == want_traces == n
        assert report.planned_conversations == want_conversations
        assert points(reader) == points(ref_reader)
        assert store.stats(now=LATER).unplanned_traces == 0
    finally:
        expected_store.close()
        store.close()
