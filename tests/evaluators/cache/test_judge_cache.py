"""The judge-result cache end to end: the real Monitor over a store (SQLite and PostgreSQL), a
scripted judge on 127.0.0.1 whose requests are counted, and the evaluation spans and events
caught by an OTLP sink."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spanjudge._core import metric_names as names
from spanjudge._core.telemetry import Telemetry, prometheus_meter_provider
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import Fault, ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.cache.conftest import Loop, script_bias, write_traces
from tests.support.clock import Clock
from tests.support.metrics import data_points

ANSWERS = ["Yes, within 30 days.", "Yes, within 30 days.", "No, never."]
DAY = 24 * 3600.0


def bias_rule(judge: Any, name: str, **params: Any) -> Rule:
    return Rule(BiasMetric(model=judge, **params), target="agent", name=name)


def judged_once(
    store: Any, server: ScriptedJudgeServer, loop: Loop, clock: Clock, **config: Any
) -> int:
    """One stored trace judged under rule bias-v1; returns the judge calls it took."""
    write_traces(store, clock, ANSWERS[:1])
    loop.monitor(store, [bias_rule(server.judge(), "bias-v1")], **config).backfill(since=0)
    return len(server.requests)


def test_a_second_rule_reuses_every_result_without_a_judge_call(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    write_traces(store, clock, ANSWERS)
    judge = judge_server.judge()
    first = loop.monitor(store, [bias_rule(judge, "bias-v1")])
    assert first.backfill(since=0).scored == 3
    # two traces ask the same question: the second one is already a hit, 2 x 3 calls in all
    assert len(judge_server.requests) == 6
    v1 = {r.target_id: r for r in store.results(rule="bias-v1")}
    assert sorted(r.cached for r in v1.values()) == [False, False, True]

    second = loop.monitor(store, [bias_rule(judge, "bias-v2")])  # a renamed rule: new jobs
    assert second.backfill(since=0).scored == 3
    assert len(judge_server.requests) == 6  # no judge call at all
    for result in store.results(rule="bias-v2"):
        before = v1[result.target_id]
        assert result.cached is True
        assert (result.score, result.label, result.reason) == (
            before.score,
            before.label,
            before.reason,
        )
        assert (result.judge_calls, result.input_tokens, result.output_tokens) == (0, 0, 0)
        assert result.verdicts == before.verdicts


def test_the_cached_mark_is_on_the_evaluation_span_and_event(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    write_traces(store, clock, ANSWERS[:1])
    judge = judge_server.judge()
    loop.monitor(store, [bias_rule(judge, "bias-v1")]).backfill(since=0)
    loop.monitor(store, [bias_rule(judge, "bias-v2")]).backfill(since=0)
    spans = loop.sink.wait_for(lambda got: len(got) >= 2)
    events = loop.sink.wait_for_logs(lambda got: len(got) >= 2)
    by_rule = {s.attributes[attrs.SPANJUDGE_EVAL_RULE]: s for s in spans}
    assert by_rule["bias-v2"].attributes[attrs.SPANJUDGE_EVAL_CACHED] is True
    assert attrs.SPANJUDGE_EVAL_CACHED not in by_rule["bias-v1"].attributes
    assert by_rule["bias-v2"].attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0
    events_by_rule = {e.attributes[attrs.SPANJUDGE_EVAL_RULE]: e for e in events}
    assert events_by_rule["bias-v2"].attributes[attrs.SPANJUDGE_EVAL_CACHED] is True
    assert attrs.SPANJUDGE_EVAL_CACHED not in events_by_rule["bias-v1"].attributes


def test_the_cache_holds_across_a_restart(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    calls = judged_once(store, judge_server, loop, clock)
    store.close()

    reopened = store_factory()  # another process's view of the same database
    mon = loop.monitor(reopened, [bias_rule(judge_server.judge(), "bias-v2")])
    assert mon.backfill(since=0).scored == 1
    assert len(judge_server.requests) == calls
    [result] = reopened.results(rule="bias-v2")
    assert result.cached


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"threshold": 0.3}, "a parameter"),
        ({"strict_mode": True}, "strict mode"),
    ],
)
def test_a_changed_parameter_never_hits(
    store_factory: Callable[[], Any],
    judge_server: ScriptedJudgeServer,
    loop: Loop,
    clock: Clock,
    change: dict[str, Any],
    why: str,
) -> None:
    store = store_factory()
    calls = judged_once(store, judge_server, loop, clock)
    judge = judge_server.judge()
    loop.monitor(store, [bias_rule(judge, "bias-v2", **change)]).backfill(since=0)
    assert len(judge_server.requests) == 2 * calls, why
    [result] = store.results(rule="bias-v2")
    assert not result.cached


def test_a_changed_prompt_template_never_hits(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    from spanjudge.evaluators._judge.metrics.bias import BiasTemplate

    class OneWordChanged(BiasTemplate):
        @staticmethod
        def generate_reason(score: float, biases: list[str]) -> str:
            # the same prompt as the parent's, with one word changed
            return BiasTemplate.generate_reason(score, biases).replace("score", "grade", 1)

    store = store_factory()
    calls = judged_once(store, judge_server, loop, clock)
    judge = judge_server.judge()
    loop.monitor(store, [bias_rule(judge, "bias-v2", evaluation_template=OneWordChanged)]).backfill(
        since=0
    )
    assert len(judge_server.requests) == 2 * calls
    assert not store.results(rule="bias-v2")[0].cached


def test_another_judge_model_never_hits(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    calls = judged_once(store, judge_server, loop, clock)
    other = judge_server.judge(model="openai/another-judge")
    loop.monitor(store, [bias_rule(other, "bias-v2")]).backfill(since=0)
    assert len(judge_server.requests) == 2 * calls
    [result] = store.results(rule="bias-v2")
    assert not result.cached and result.judge_model == "openai/another-judge"


def test_an_entry_older_than_the_max_age_is_not_reused_and_is_pruned(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    calls = judged_once(store, judge_server, loop, clock, judge_cache_max_age_seconds=DAY)
    judge = judge_server.judge()
    key_rows = store.select("SELECT cache_key FROM judge_cache", ())
    assert len(key_rows) == 1

    clock.advance(DAY - 1)  # still fresh
    loop.monitor(store, [bias_rule(judge, "bias-v2")], judge_cache_max_age_seconds=DAY).backfill(
        since=0
    )
    assert len(judge_server.requests) == calls

    clock.advance(2)  # now older than a day
    mon = loop.monitor(store, [bias_rule(judge, "bias-v3")], judge_cache_max_age_seconds=DAY)
    assert store.cached_result(key_rows[0][0], since=clock() - DAY) is None
    mon.backfill(since=0)
    assert len(judge_server.requests) == 2 * calls  # judged again...
    assert not store.results(rule="bias-v3")[0].cached
    # ...and the fresh result replaced the expired entry (one row per key)
    assert store.select("SELECT COUNT(*) FROM judge_cache", ())[0][0] == 1
    clock.advance(DAY + 1)
    mon.tick()  # nothing to evaluate: the tick only prunes what expired
    assert store.select("SELECT COUNT(*) FROM judge_cache", ())[0][0] == 0


def test_the_cache_can_be_switched_off(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    write_traces(store, clock, ANSWERS[:2])  # the same answer twice
    judge = judge_server.judge()
    loop.monitor(store, [bias_rule(judge, "bias-v1")], judge_cache=False).backfill(since=0)
    assert len(judge_server.requests) == 6  # both judged
    loop.monitor(store, [bias_rule(judge, "bias-v2")], judge_cache=False).backfill(since=0)
    assert len(judge_server.requests) == 12
    assert not any(r.cached for r in store.results())
    assert store.select("SELECT COUNT(*) FROM judge_cache", ())[0][0] == 0


def test_errors_are_never_cached(
    store_factory: Callable[[], Any], loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    write_traces(store, clock, ANSWERS[:1])
    with ScriptedJudgeServer() as server:
        server.add_rule(Fault.malformed('{"opinions": '))  # never valid: judge_invalid_response
        judge = server.judge(max_output_attempts=1)
        report = loop.monitor(store, [bias_rule(judge, "bias-v1")]).backfill(since=0)
        assert report.errors == 1
        server.clear()
        script_bias(server)
        loop.monitor(store, [bias_rule(judge, "bias-v2")]).backfill(since=0)
        assert len(server.requests) == 3  # judged: the error was not reused
    [result] = store.results(rule="bias-v2")
    assert result.status == "scored" and not result.cached


def test_racing_writers_keep_one_entry_and_a_real_result(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    judged_once(store, judge_server, loop, clock)
    [(key, text)] = store.select("SELECT cache_key, record FROM judge_cache", ())
    [record] = store.results(rule="bias-v1")
    other = store_factory()  # a second worker that missed on the same key at the same time
    record.reason = "the other worker's reason"
    other.put_cached_result(key, record, now=clock() + 1)
    store.put_cached_result(key, record, now=clock() + 2)
    rows = store.select("SELECT record, created_at FROM judge_cache", ())
    assert len(rows) == 1 and rows[0][1] == clock() + 2
    hit = other.cached_result(key, since=clock())
    assert hit is not None and hit.reason == "the other worker's reason" and hit.score == 0.0
    with pytest.raises(ValueError, match="only scored results"):
        record.status = "error"
        store.put_cached_result(key, record, now=clock())
    assert text  # the first entry was a real result too


def test_hits_are_counted_on_metrics(
    store_factory: Callable[[], Any], judge_server: ScriptedJudgeServer, loop: Loop, clock: Clock
) -> None:
    store = store_factory()
    write_traces(store, clock, ANSWERS)
    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    loop.telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    judge = judge_server.judge()
    loop.monitor(store, [bias_rule(judge, "bias-v1")]).backfill(since=0)
    loop.telemetry = Telemetry(prometheus_meter_provider(registry))
    loop.monitor(store, [bias_rule(judge, "bias-v2")]).backfill(since=0)

    points = [
        (p.attributes, p.value) for name, p in data_points(reader) if name == names.JUDGE_CACHE_HITS
    ]
    assert points == [({"metric": "bias", "rule": "bias-v1"}, 1)]
    scraped = [
        (sample.labels.get("metric"), sample.labels.get("rule"), sample.value)
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.name == "spanjudge_judge_cache_hits_total"
    ]
    assert scraped == [("bias", "bias-v2", 3.0)]
