"""Both outputs through the online loop: @observe spans -> store -> Monitor tick -> evaluation
spans on /v1/traces and ``gen_ai.evaluation.result`` log records on /v1/logs, each output
delivered and marked on its own, re-sent after an outage exactly once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge._core.span_record import evaluation_span_id
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import DROP_EXPORT_FAILED, ScoreEmitter
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import conversation, observe
from tests.support.otlp_sink import OtlpSink, ReceivedLog
from tests.support.ports import closed_port

CONTEXT = "Refunds are possible within 30 days of delivery."
RESPONSE_ID = "chatcmpl-AbC123"
LEASE = 60.0
# a model in litellm's price table (served by the offline judge): results carry a cost
PRICED_MODEL = "openai/gpt-4o-mini"


@observe(kind="retriever", name="kb")
def search(query: str) -> list[str]:
    return [CONTEXT]


@observe(kind="llm", model="app-model")
def chat(messages: list[dict[str, str]], answer: str) -> str:
    # what a provider instrumentation records from the response (the OpenAI response id)
    trace.get_current_span().set_attribute(attrs.GEN_AI_RESPONSE_ID, RESPONSE_ID)
    return answer


@observe(kind="agent", name="support")
def agent(question: str, answer: str) -> str:
    docs = search(question)
    return chat([{"role": "user", "content": question + " " + " ".join(docs)}], answer)


def make_monitor(
    store: Any,
    judge: Any,
    *,
    traces_url: str,
    logs_url: str,
    clock: Any,
    outputs: list[str] | None = None,
    rules: list[Rule] | None = None,
    **config: Any,
) -> Monitor:
    emitter = ScoreEmitter(
        outputs=outputs,
        span_exporter=OTLPSpanExporter(endpoint=traces_url, timeout=2),
        log_exporter=OTLPLogExporter(endpoint=logs_url, timeout=1),
    )
    return Monitor(
        rules
        or [
            Rule(FaithfulnessMetric(model=judge), target="llm"),
            Rule(BiasMetric(model=judge), target="agent"),
        ],
        store=store,
        emitter=emitter,
        clock=clock,
        config=MonitorConfig(
            settle_seconds=10, lease_seconds=LEASE, retention_seconds=None, **config
        ),
    )


def per_result(logs: list[ReceivedLog]) -> Counter[tuple[str, str, Any]]:
    """Log records per (trace id, span id, rule): 1 each means once per result."""
    return Counter(
        (log.trace_id, log.span_id, log.attributes.get(attrs.SPANJUDGE_EVAL_RULE)) for log in logs
    )


def spans_by_name(store: Any, operation: str) -> list[Any]:
    return [
        s
        for t in store.targets_since(since=0, until=1e12)[0]
        for s in store.trace_spans(t)
        if s.attributes.get(attrs.GEN_AI_OPERATION_NAME) == operation
    ]


def test_a_tick_sends_each_result_as_an_event_on_the_evaluated_span_with_its_response_id(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: OtlpSink, clock: Any
) -> None:
    agent("Can I return it after 2 months?", "Yes, returns are possible within 90 days.")
    app.flush()
    clock.advance(11)
    judge = offline_judge.judge(model=PRICED_MODEL)
    mon = make_monitor(
        store, judge, traces_url=sink.traces_url, logs_url=sink.logs_url, clock=clock
    )
    assert mon.tick().scored == 2
    logs = sink.wait_for_logs(lambda got: len(got) >= 2)
    spans = sink.wait_for(lambda got: len(got) >= 2)
    [llm] = spans_by_name(store, "chat")
    [turn] = spans_by_name(store, "invoke_agent")
    assert llm.attributes[attrs.GEN_AI_RESPONSE_ID] == RESPONSE_ID  # the stored span had one
    stored = {r.metric: r for r in store.results()}

    faith = next(e for e in logs if e.attributes[attrs.GEN_AI_EVALUATION_NAME] == "faithfulness")
    assert faith.event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT
    assert (faith.trace_id, faith.span_id) == (llm.trace_id, llm.span_id)
    assert faith.scope_name == "spanjudge" and faith.resource["service.name"] == "spanjudge"
    a = faith.attributes
    assert a[attrs.GEN_AI_RESPONSE_ID] == RESPONSE_ID
    assert a[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0  # 90 days contradicts 30
    assert a[attrs.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
    assert "30" in a[attrs.GEN_AI_EVALUATION_EXPLANATION]
    assert attrs.ERROR_TYPE not in a
    assert a[attrs.SPANJUDGE_EVAL_RULE] == "faithfulness-llm"
    assert a[attrs.SPANJUDGE_EVAL_JUDGE_MODEL] == PRICED_MODEL
    assert a[attrs.SPANJUDGE_EVAL_THRESHOLD] == stored["faithfulness"].threshold == 0.5
    cost = stored["faithfulness"].cost
    assert cost is not None and cost > 0 and a[attrs.SPANJUDGE_EVAL_COST] == cost

    bias = next(e for e in logs if e.attributes[attrs.GEN_AI_EVALUATION_NAME] == "bias")
    assert (bias.trace_id, bias.span_id) == (turn.trace_id, turn.span_id)
    assert attrs.GEN_AI_RESPONSE_ID not in bias.attributes  # the agent span carried none
    assert bias.attributes[attrs.SPANJUDGE_EVAL_RULE] == "bias-agent"

    # the span output is unchanged beside the events: one evaluation span under each target
    faith_span = next(s for s in spans if s.name == "evaluation faithfulness")
    assert faith_span.parent_span_id == faith.span_id and faith_span.trace_id == faith.trace_id
    assert faith_span.span_id == evaluation_span_id("faithfulness-llm", "llm", llm.span_id)
    assert len(spans) == 2 and len(logs) == 2
    assert store.unemitted_results() == []  # both outputs confirmed and marked


def test_a_conversation_event_hangs_under_the_last_turn(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: OtlpSink, clock: Any
) -> None:
    with conversation("conv-events"):
        agent("Can I return my order?", "Yes, within 30 days of delivery.")
        clock.advance(60)
        agent("Who will win the world cup?", "I think Brazil will win.")
    app.flush()
    rule = Rule(
        TopicAdherenceMetric(relevant_topics=["orders and returns"], model=offline_judge.judge()),
        target="conversation",
    )
    mon = make_monitor(
        store,
        None,
        traces_url=sink.traces_url,
        logs_url=sink.logs_url,
        clock=clock,
        rules=[rule],
        idle_seconds=300,
    )
    clock.advance(301)
    assert mon.tick().scored == 1
    [event] = sink.wait_for_logs(lambda got: len(got) >= 1)
    [span] = sink.wait_for(lambda got: len(got) >= 1)
    last_turn = max(spans_by_name(store, "invoke_agent"), key=lambda s: s.start_time_unix_nano)
    assert (event.trace_id, event.span_id) == (last_turn.trace_id, last_turn.span_id)
    assert (span.trace_id, span.parent_span_id) == (event.trace_id, event.span_id)
    assert event.attributes[attrs.SPANJUDGE_EVAL_TARGET] == "conversation"
    assert event.attributes[attrs.SPANJUDGE_EVAL_TARGET_ID] == "conv-events"
    assert event.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.5


@pytest.mark.parametrize(("outputs", "spans", "events"), [(["span"], 2, 0), (["event"], 0, 2)])
def test_one_output_sends_only_its_own_form(
    app: Any,
    store: Any,
    offline_judge: ScriptedJudgeServer,
    sink: OtlpSink,
    clock: Any,
    outputs: list[str],
    spans: int,
    events: int,
) -> None:
    agent("How long do refunds take?", CONTEXT)
    app.flush()
    clock.advance(11)
    mon = make_monitor(
        store,
        offline_judge.judge(),
        traces_url=sink.traces_url,
        logs_url=sink.logs_url,
        clock=clock,
        outputs=outputs,
    )
    assert mon.tick().scored == 2
    assert mon.emitter is not None and mon.emitter.force_flush(10)
    mon.close()
    assert (len(sink.spans), len(sink.logs)) == (spans, events)
    assert (sink.requests > 0, sink.log_requests > 0) == (spans > 0, events > 0)
    # the output not configured stays owed in the store (another process may have it on)
    assert len(store.unemitted_results(outputs=outputs)) == 0


def test_a_refusing_log_endpoint_delays_only_the_events_which_are_resent_exactly_once(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, clock: Any
) -> None:
    """Expected: with /v1/logs answering 503 the tick still scores and the spans are delivered
    and marked; the events stay owed; a monitor started after the outage re-sends only the
    events, once each, a lease after the results were stored."""
    for i in range(2):
        agent(f"Question {i}: how long do refunds take?", CONTEXT)
    app.flush()
    clock.advance(11)
    with OtlpSink(logs_status=503) as sink:
        first = make_monitor(
            store,
            offline_judge.judge(),
            traces_url=sink.traces_url,
            logs_url=sink.logs_url,
            clock=clock,
        )
        assert first.tick().scored == 4
        sink.wait_for(lambda got: len(got) >= 4)
        assert sink.log_requests >= 1  # the events were offered and refused
        assert store.unemitted_results(outputs=["span"]) == []
        owed = store.unemitted_results()
        assert len(owed) == 4 and {item.outputs for item in owed} == {("event",)}
        assert first.emitter is not None
        dropped = first.emitter.dropped_by_output()  # type: ignore[attr-defined]
        assert dropped["event"].get(DROP_EXPORT_FAILED, 0) >= 1 and dropped["span"] == {}
        first.close()

        sink.logs_status = None  # the log backend is back
        refused = len(sink.logs)  # the sink keeps what it refused; count only what follows
        spans_before = len(sink.spans)
        restarted = make_monitor(
            store,
            offline_judge.judge(),
            traces_url=sink.traces_url,
            logs_url=sink.logs_url,
            clock=clock,
        )
        assert restarted.tick().reemitted == 0  # not a lease old yet: maybe still in flight
        clock.advance(LEASE + 1)
        report = restarted.tick()
        assert report.reemitted == 4 and report.claimed == 0
        sink.wait_for_logs(lambda got: len(got) >= refused + 4)
        assert store.unemitted_results() == []
        clock.advance(LEASE + 1)
        assert restarted.tick().reemitted == 0
        assert restarted.emitter is not None and restarted.emitter.force_flush(10)
        restarted.close()
        delivered = sink.logs[refused:]
        assert len(sink.spans) == spans_before  # no span re-sent: that output was delivered
    results = store.results()
    expected = {(r.trace_id, r.span_id, r.rule) for r in results}
    assert per_result(delivered) == Counter({key: 1 for key in expected})


@pytest.mark.timeout(60)  # a hang guard: a tick blocked on the dead backend would never end
def test_a_dead_logs_backend_blocks_neither_evaluation_nor_the_spans(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, sink: OtlpSink, clock: Any
) -> None:
    agent("Can I pay by card?", "Refunds are possible within 30 days of delivery.")
    app.flush()
    clock.advance(11)
    mon = make_monitor(
        store,
        offline_judge.judge(),
        traces_url=sink.traces_url,
        logs_url=f"http://127.0.0.1:{closed_port()}/v1/logs",
        clock=clock,
    )
    assert mon.tick().scored == 2
    assert len(sink.wait_for(lambda got: len(got) >= 2)) == 2
    assert store.unemitted_results(outputs=["span"]) == []
    assert len(store.unemitted_results(outputs=["event"])) == 2
    agent("Is shipping free?", "Refunds are possible within 30 days of delivery.")
    app.flush()
    clock.advance(LEASE + 1)  # the first results are orphans of the outage now
    report = mon.tick()
    assert report.scored == 2  # the next trace is evaluated meanwhile
    assert len(sink.wait_for(lambda got: len(got) >= 4)) == 4
    assert store.unemitted_results(outputs=["span"]) == []
    assert len(store.unemitted_results(outputs=["event"])) == 4
    mon.close()
    assert sink.logs == []
