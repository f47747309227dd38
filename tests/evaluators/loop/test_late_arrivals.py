"""Late arrivals are evaluated (issue 30 item 3), on SQLite and PostgreSQL: a child LLM span that
arrives after its trace was planned gets its job once the trace settles again, while the targets
planned before keep their one job and result; a conversation that gets a new turn after it was
judged is judged again over all its turns, the earlier result kept as superseded. Both are
counted and logged. Spans are written straight into the store on a controlled clock."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace
from tests.support.clock import Clock
from tests.support.stores import BACKENDS, schema_name, stores_on

SETTLE = 10.0
IDLE = 300.0


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SpanStore]:
    with stores_on(str(request.param), tmp_path / "spans.db", schema_name()) as make:
        yield make()


def monitor(store: SpanStore, judge: Any, clock: Clock, *rules: Rule) -> Monitor:
    config = MonitorConfig(settle_seconds=SETTLE, idle_seconds=IDLE, retention_seconds=None)
    return Monitor(list(rules), store=store, clock=clock, config=config)


def bias(judge: Any) -> Rule:
    return Rule(BiasMetric(model=judge), target="llm", name="bias-llm")


def keys(store: SpanStore) -> list[tuple[str, str]]:
    return sorted((r.rule, r.target_id) for r in store.results())


def test_a_child_llm_span_arriving_after_its_trace_was_planned_is_evaluated(
    store: SpanStore,
    offline_judge: ScriptedJudgeServer,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    trace = Trace()
    root = trace.agent()
    first = trace.llm("Where is my order?", "It ships tomorrow.", parent=root)
    store.write_spans([root, first], now=clock())
    mon = monitor(store, None, clock, bias(offline_judge.judge()))
    clock.advance(SETTLE + 1)
    assert mon.tick().scored == 1
    calls = len(offline_judge.requests)

    late = trace.llm("And the invoice?", "It is attached to the email.", parent=root)
    store.write_spans([late], now=clock())  # the exporter's next batch, after planning
    assert mon.tick().planned_traces == 0, "the trace settles again first"
    clock.advance(SETTLE + 1)
    caplog.set_level(logging.DEBUG, logger="spanjudge.planner")
    report = mon.tick()

    assert (report.replanned_traces, report.late_spans, report.late_targets) == (1, 1, 1)
    assert (report.jobs_enqueued, report.scored) == (1, 1)
    assert keys(store) == sorted([("bias-llm", first.span_id), ("bias-llm", late.span_id)])
    assert all(r.status == "scored" for r in store.results())
    assert len(offline_judge.requests) > calls
    assert (mon.planner.late.traces, mon.planner.late.spans) == (1, 1)
    said = [r.getMessage() for r in caplog.records if r.name == "spanjudge.planner"]
    assert any("late arrivals planned again: 1 trace(s) with 1 span(s)" in m for m in said)
    assert any(f"trace {trace.trace_id} planned again" in m for m in said)

    clock.advance(1000)
    assert mon.tick().claimed == 0, "nothing planned or judged twice"
    assert len(store.results()) == 2


def test_a_late_span_with_no_new_target_or_our_own_score_plans_nothing_new(
    store: SpanStore, offline_judge: ScriptedJudgeServer, clock: Clock
) -> None:
    trace = Trace()
    root = trace.agent()
    llm = trace.llm(parent=root)
    store.write_spans([root, llm], now=clock())
    mon = monitor(store, None, clock, bias(offline_judge.judge()))
    clock.advance(SETTLE + 1)
    assert mon.tick().scored == 1

    tool = trace.tool("lookup", {"id": 7}, {"status": "shipped"}, parent=root)
    store.write_spans([tool], now=clock())
    score = trace.span("evaluation bias", llm, {attrs.GEN_AI_EVALUATION_NAME: "bias"})
    store.write_spans([score], now=clock())
    clock.advance(SETTLE + 1)
    report = mon.tick()
    assert (report.replanned_traces, report.late_spans, report.jobs_enqueued) == (1, 1, 0)
    assert report.skipped == {}, "the targets planned the first time are not counted again"
    assert len(store.results()) == 1


def test_a_conversation_with_a_new_turn_after_it_was_judged_is_judged_again(
    store: SpanStore, offline_judge: ScriptedJudgeServer, clock: Clock
) -> None:
    judge = offline_judge.judge()
    rule = Rule(
        TopicAdherenceMetric(relevant_topics=["orders and returns"], model=judge),
        target="conversation",
        name="topics",
    )
    one = Trace()
    first = one.agent(
        user="Can I return my order?", answer="Yes, within 30 days.", conversation_id="c-7"
    )
    store.write_spans([first], now=clock())
    mon = monitor(store, None, clock, rule)
    clock.advance(IDLE + 1)
    assert mon.tick().scored == 1
    [judged] = store.results()
    assert judged.span_id == first.span_id

    two = Trace()
    second = two.agent(
        user="Who will win the world cup?",
        answer="I think Brazil will win.",
        conversation_id="c-7",
        start=first.end_time_unix_nano + 60_000_000_000,
    )
    store.write_spans([second], now=clock())
    assert mon.tick().planned_conversations == 0, "it goes idle again first"
    clock.advance(IDLE + 1)
    report = mon.tick()

    assert (report.rejudged_conversations, report.scored) == (1, 1)
    [current] = store.results()
    assert (current.target_id, current.trace_id, current.span_id) == (
        "c-7",
        two.trace_id,
        second.span_id,
    ), "judged over both turns, under the new last turn"
    assert current.score == 0.5  # one on-topic answer, one off-topic: both turns were read
    [old] = store.superseded_results(rule="topics")
    assert (old.reason, old.record.span_id, old.record.score) == (
        "new_turns",
        first.span_id,
        judged.score,
    )
    assert mon.planner.late.conversations == 1

    store.write_spans([second], now=clock())  # the last turn delivered again: no new turn
    clock.advance(IDLE + 1)
    assert mon.tick().rejudged_conversations == 0
    assert len(store.superseded_results()) == 1


def test_backfill_plans_every_target_of_a_trace_that_got_late_spans(
    store: SpanStore, offline_judge: ScriptedJudgeServer, clock: Clock
) -> None:
    trace = Trace()
    root = trace.agent()
    first = trace.llm(parent=root)
    store.write_spans([root, first], now=clock())
    store.mark_planned(traces=[trace.trace_id], now=clock() + SETTLE)  # before the rule existed
    late = trace.llm("And the invoice?", "It is attached.", parent=root)
    store.write_spans([late], now=clock() + SETTLE + 1)
    mon = monitor(store, None, clock, bias(offline_judge.judge()))  # a rule added since

    report = mon.backfill(since=clock() - 1, until=clock() + 100)
    assert report.scored == 2, "the new rule's targets in the spans planned before, too"
    assert keys(store) == sorted([("bias-llm", first.span_id), ("bias-llm", late.span_id)])
    assert store.late_spans([trace.trace_id]) == {}
