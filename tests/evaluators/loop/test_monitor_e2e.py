"""The online loop end to end: @observe spans -> store -> monitor -> judge -> evaluation spans
over real OTLP/HTTP into the same traces."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from spanjudge._core.span_record import evaluation_span_id
from spanjudge._core.telemetry import Telemetry
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.testing import Fault, ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import conversation, observe
from tests.support.metrics import data_points

CONTEXT = "Refunds are possible within 30 days of delivery."


@observe(kind="retriever", name="kb")
def search(query: str) -> list[str]:
    return [CONTEXT]


@observe(kind="llm", model="app-model")
def chat(messages: list[dict[str, str]], answer: str) -> str:
    return answer


@observe(kind="agent", name="support")
def agent(question: str, answer: str, retrieve: bool = True) -> str:
    docs = search(question) if retrieve else []
    return chat([{"role": "user", "content": question + " " + " ".join(docs)}], answer)


def monitor_for(store: Any, judge: Any, sink: Any, clock: Any, **options: Any) -> Monitor:
    options.setdefault(
        "rules",
        [
            Rule(FaithfulnessMetric(model=judge), target="llm"),
            Rule(BiasMetric(model=judge), target="agent"),
        ],
    )
    rules = options.pop("rules")
    telemetry = options.pop("telemetry", None)
    return Monitor(
        rules,
        store=store,
        emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url)),
        telemetry=telemetry,
        clock=clock,
        config=MonitorConfig(settle_seconds=10, retention_seconds=None, **options),
    )


def llm_span_ids(store: Any) -> list[tuple[str, str]]:
    out = []
    for trace_id in store.targets_since(since=0, until=1e12)[0]:
        for span in store.trace_spans(trace_id):
            if span.attributes.get(attrs.GEN_AI_OPERATION_NAME) == "chat":
                out.append((trace_id, span.span_id))
    return out


def test_scores_are_written_into_the_evaluated_trace(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    agent(
        "Can I return it after 2 months?", "Yes, returns are possible within 90 days of delivery."
    )
    app.flush()
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    mon = monitor_for(store, offline_judge.judge(), sink, clock, telemetry=telemetry)

    early = mon.tick()  # the trace has not settled yet
    assert early.planned_traces == 0 and offline_judge.requests == []

    clock.advance(11)
    report = mon.tick()
    assert report.scored == 2 and report.errors == 0
    ((trace_id, llm_span_id),) = llm_span_ids(store)
    spans = sink.wait_for(lambda s: len(s) >= 2)
    faith = next(s for s in spans if s.name == "evaluation faithfulness")
    assert faith.trace_id == trace_id
    assert faith.parent_span_id == llm_span_id
    assert faith.span_id == evaluation_span_id("faithfulness-llm", "llm", llm_span_id)
    assert faith.attributes[attrs.GEN_AI_EVALUATION_NAME] == "faithfulness"
    assert faith.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0  # 90 days contradicts 30
    assert faith.attributes[attrs.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
    assert "30" in faith.attributes[attrs.GEN_AI_EVALUATION_EXPLANATION]
    assert faith.attributes[attrs.SPANJUDGE_EVAL_JUDGE_MODEL] == "openai/scripted-judge"
    event_name, event = faith.events[0]
    assert event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT
    assert event[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0

    bias = next(s for s in spans if s.name == "evaluation bias")
    root = next(s for s in store.trace_spans(trace_id) if s.is_root)
    assert bias.parent_span_id == root.span_id and bias.trace_id == trace_id

    stored = {r.metric: r for r in mon.results()}
    assert stored["faithfulness"].score == 0.0 and stored["bias"].label == "pass"
    points = {(name, tuple(sorted(p.attributes.items()))) for name, p in data_points(reader)}
    assert any(
        name == "spanjudge.evaluations" and ("label", "fail") in labels for name, labels in points
    )


def test_a_restarted_monitor_evaluates_and_emits_nothing_twice(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    agent("How long do refunds take?", "Refunds are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    first = monitor_for(store, offline_judge.judge(), sink, clock)
    assert first.tick().scored == 2
    sink.wait_for(lambda s: len(s) >= 2)
    calls = len(offline_judge.requests)

    clock.advance(1000)  # any lease long expired
    again = monitor_for(store, offline_judge.judge(), sink, clock)
    report = again.tick()
    assert report.claimed == 0 and report.reemitted == 0 and report.scored == 0
    assert len(offline_judge.requests) == calls
    assert len(sink.spans) == 2
    assert len(store.results()) == 2


def test_conversation_is_evaluated_once_it_has_been_idle(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    with conversation("conv-1"):
        agent("Can I return my order?", "Yes, within 30 days of delivery.")
        clock.advance(60)
        agent("Who will win the world cup?", "I think Brazil will win.")
    app.flush()
    rule = Rule(
        TopicAdherenceMetric(relevant_topics=["orders and returns"], model=offline_judge.judge()),
        target="conversation",
    )
    mon = monitor_for(store, None, sink, clock, rules=[rule], idle_seconds=300)
    clock.advance(100)
    assert mon.tick().planned_conversations == 0  # a turn arrived 100 s ago
    clock.advance(201)
    report = mon.tick()
    assert report.planned_conversations == 1 and report.scored == 1
    (result,) = mon.results()
    assert result.target_type == "conversation" and result.target_id == "conv-1"
    assert result.score == 0.5  # one on-topic answer (TP), one off-topic answer (FP)
    (span,) = sink.wait_for(lambda s: len(s) >= 1)
    last_turn = max(
        (
            s
            for t in store.targets_since(since=0, until=1e12)[0]
            for s in store.trace_spans(t)
            if s.attributes.get(attrs.GEN_AI_OPERATION_NAME) == "invoke_agent"
        ),
        key=lambda s: s.start_time_unix_nano,
    )
    assert span.parent_span_id == last_turn.span_id


def test_judge_errors_are_recorded_never_scored(
    app: Any, store: Any, sink: Any, clock: Any
) -> None:
    agent("Can I return it?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    with ScriptedJudgeServer() as broken:
        broken.add_rule(Fault.status(500))
        judge = broken.judge(max_retries=1, backoff_base=0.01)
        mon = monitor_for(store, judge, sink, clock, max_attempts=2, retry_delay_seconds=5)
        first = mon.tick()
        assert first.retried == 2 and first.scored == 0  # transient: back to pending
        assert mon.results() == []
        clock.advance(11)
        second = mon.tick()
    assert second.errors == 2
    results = mon.results()
    assert {r.status for r in results} == {"error"}
    assert all(r.score is None and r.error_type == "judge_server_error" for r in results)
    spans = sink.wait_for(lambda s: len(s) >= 2)
    for span in spans:
        assert span.attributes[attrs.ERROR_TYPE] == "judge_server_error"
        assert attrs.GEN_AI_EVALUATION_SCORE_VALUE not in span.attributes
        assert span.status_code == 2  # ERROR


def test_target_without_retrieval_context_is_skipped_without_a_judge_call(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    agent("Can I return it?", "Yes.", retrieve=False)
    app.flush()
    clock.advance(11)
    rules = [Rule(FaithfulnessMetric(model=offline_judge.judge()), target="llm")]
    report = monitor_for(store, None, sink, clock, rules=rules).tick()
    assert report.missing == 1 and offline_judge.requests == []
    (result,) = store.results()
    assert result.status == "skipped" and "retrieval_context" in (result.skip_reason or "")
    (span,) = sink.wait_for(lambda s: len(s) >= 1)
    assert span.attributes[attrs.ERROR_TYPE] == "missing_field"


def test_unsampled_targets_get_no_job(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    for i in range(6):
        agent(f"Question {i} about returns?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    rules = [Rule(BiasMetric(model=offline_judge.judge()), target="agent", sample_rate=0.0)]
    report = monitor_for(store, None, sink, clock, rules=rules).tick()
    assert report.jobs_enqueued == 0 and report.skipped == {"not_sampled": 6}
    assert offline_judge.requests == []


def test_spans_a_filter_turns_away_are_counted_as_filtered(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    for i in range(4):
        agent(f"Question {i} about returns?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    telemetry_reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[telemetry_reader]))
    rules = [
        Rule(BiasMetric(model=offline_judge.judge()), target="agent", filter={"service": "other"}),
        Rule(FaithfulnessMetric(model=offline_judge.judge()), target="llm", name="all-llm"),
    ]
    report = monitor_for(store, None, sink, clock, rules=rules, telemetry=telemetry).tick()
    assert report.skipped == {"filtered": 4}  # the unfiltered rule skips nothing
    points = [
        (p.attributes, p.value)
        for name, p in data_points(telemetry_reader)
        if name == "spanjudge.sampler.skipped"
    ]
    assert points == [({"rule": "bias-agent", "reason": "filtered"}, 4)]


def test_rate_budget_caps_jobs_and_counts_the_rest(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    for i in range(5):
        agent(f"Question {i} about returns?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    rules = [Rule(BiasMetric(model=offline_judge.judge()), target="agent", max_per_minute=2)]
    report = monitor_for(store, None, sink, clock, rules=rules).tick()
    assert report.jobs_enqueued == 2 and report.skipped == {"rate_budget": 3}


@pytest.mark.parametrize("retention", [60.0])
def test_retention_deletes_old_spans(
    app: Any,
    store: Any,
    offline_judge: ScriptedJudgeServer,
    sink: Any,
    clock: Any,
    retention: float,
) -> None:
    agent("Old question?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(retention + 1)
    rules = [Rule(BiasMetric(model=offline_judge.judge()), target="agent")]
    mon = Monitor(
        rules,
        store=store,
        emitter=None,
        clock=clock,
        config=MonitorConfig(retention_seconds=retention, settle_seconds=10),
    )
    report = mon.tick()
    assert report.deleted_spans >= 3
    assert store.targets_since(since=0, until=1e12) == ([], [])


def test_daily_cost_budget_stops_planning_and_survives_a_restart(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: Any, clock: Any
) -> None:
    # a model in litellm's price table, served by the offline judge: every call has a cost
    judge = offline_judge.judge(model="openai/gpt-4o-mini")
    rules = lambda: [  # noqa: E731
        Rule(BiasMetric(model=judge), target="agent", max_cost_per_day=1e-9)
    ]
    agent("First question about returns?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    first = monitor_for(store, None, sink, clock, rules=rules())
    assert first.tick().scored == 1
    (spent,) = store.results()
    assert spent.cost is not None and spent.cost > 1e-9  # the day's budget is used up

    agent("Second question about returns?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    assert first.tick().skipped == {"cost_budget": 1}

    agent("Third question about returns?", "Returns are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    restarted = monitor_for(store, None, sink, clock, rules=rules())  # seeds today's spend
    report = restarted.tick()
    assert report.skipped == {"cost_budget": 1} and report.scored == 0
    assert len(store.results()) == 1


# A hang guard, not a speed check: a tick that waited for the stuck export (up to 30 s each
# before this behaviour) would blow it; with it, the ticks wait 0.05 s for the exporter.
@pytest.mark.timeout(20)
def test_a_stalled_backend_delays_marking_not_evaluating(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, clock: Any
) -> None:
    """An export that hangs does not hold the tick: the next traces are evaluated meanwhile,
    results are marked emitted only for the spans the exporter confirmed, once it did."""
    import threading

    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class StalledBackend(SpanExporter):
        def __init__(self) -> None:
            self.release = threading.Event()
            self.started = threading.Event()
            self.received: list[Any] = []

        def export(self, spans: Any) -> SpanExportResult:
            self.started.set()
            assert self.release.wait(60), "the test never released the backend"
            self.received.extend(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            self.release.set()

    backend = StalledBackend()
    judge = offline_judge.judge()
    mon = Monitor(
        [Rule(BiasMetric(model=judge), target="agent")],
        store=store,
        emitter=ScoreEmitter(span_exporter=backend),
        clock=clock,
        config=MonitorConfig(settle_seconds=10, retention_seconds=None, flush_timeout_seconds=0.05),
    )
    agent("How long do refunds take?", "Refunds are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    assert mon.tick().scored == 1
    assert backend.started.wait(10)  # the export is in flight and stuck
    agent("Can I pay by card?", "Yes, every major card is accepted.")
    app.flush()
    clock.advance(11)
    assert mon.tick().scored == 1  # evaluation went on while the backend hung
    assert not backend.release.is_set() and backend.received == []
    assert len(store.unemitted_results(outputs=["span"])) == 2  # nothing confirmed, nothing marked
    clock.advance(mon.config.lease_seconds + 1)
    # a lease later they count as orphans, but the exporter is still stuck on them: re-sending
    # would only pile up behind it
    assert mon.tick().reemitted == 0
    backend.release.set()
    assert mon.emitter is not None and mon.emitter.force_flush(10)
    mon.tick()
    assert store.unemitted_results(outputs=["span"]) == []
    assert len(backend.received) == 2
