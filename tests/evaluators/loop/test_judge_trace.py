"""A traced judge (issue 39 item 3): each judge call of an evaluation is a GenAI chat span in a
trace of its own, found from the evaluation span by following its link; off, nothing is made."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.judges import judge_trace, litellm_judge
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.testing.judge_server import Fault
from tests.evaluators.online.spans import Trace

ANSWER = "It ships tomorrow, sorry for the wait."
REASON = "The answer states no opinion at all."
OPINION = "Shipping tomorrow is acceptable."


@pytest.fixture(autouse=True, params=["direct", "litellm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Traced over both judge transports (the engine records the calls, not the transport)."""
    monkeypatch.setattr(litellm_judge, "DEFAULT_TRANSPORT", request.param)


@pytest.fixture
def judge_server() -> Iterator[ScriptedJudgeServer]:
    with ScriptedJudgeServer() as server:
        script(server)
        yield server


def script(server: ScriptedJudgeServer) -> None:
    """Opinions, a verdict on each, then the reason: three judge calls per evaluation."""
    server.add_rule({"opinions": [OPINION]}, schema="Opinions")
    server.add_rule({"verdicts": [{"verdict": "no", "reason": "neutral"}]}, match=verdicts)
    server.add_rule({"reason": REASON}, schema="Reason")


def verdicts(request: Any) -> bool:
    return "Verdicts" in (request.schema_name or "")


def evaluate(store: SpanStore, judge: Any, **config: Any) -> tuple[list[ReadableSpan], str, Any]:
    """One judged LLM turn: the spans the worker exported, the app's trace id, the result."""
    trace = Trace()
    trace.llm("Where is my order?", ANSWER)
    now = time.time()
    store.write_spans(trace.spans, now=now - 100)
    exporter = InMemorySpanExporter()
    emitter = ScoreEmitter(span_exporter=exporter)
    monitor = Monitor(
        [Rule(BiasMetric(model=judge), target="llm", name="bias")],
        store=store,
        emitter=emitter,
        clock=time.time,
        config=MonitorConfig(settle_seconds=10, retention_seconds=None, **config),
    )
    assert monitor.tick().scored == 1
    assert emitter.force_flush(10)
    [result] = store.results()
    return list(exporter.get_finished_spans()), trace.trace_id, result


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def follow(spans: list[ReadableSpan], evaluation: ReadableSpan) -> list[ReadableSpan]:
    """The judge trace the evaluation span links to: its root, then the root's children."""
    [link] = [link for link in evaluation.links if link.attributes.get("spanjudge.link") == "judge"]
    ids = {(s.context.trace_id, s.context.span_id): s for s in spans}
    root = ids[(link.context.trace_id, link.context.span_id)]
    children = [
        s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    return [root, *children]


def test_the_judge_prompt_and_completion_are_found_from_the_evaluation_span(
    store: SpanStore, judge_server: ScriptedJudgeServer
) -> None:
    spans, app_trace, result = evaluate(store, judge_server.judge(), judge_tracing=True)
    [evaluation] = by_name(spans, "evaluation bias")
    assert f"{evaluation.context.trace_id:032x}" == app_trace
    root, *calls = follow(spans, evaluation)
    assert root.name == "judge bias" and root.parent is None
    # its own trace, and a link back to the evaluation span
    assert root.context.trace_id != evaluation.context.trace_id
    [back] = root.links
    assert (back.context.trace_id, back.context.span_id) == (
        evaluation.context.trace_id,
        evaluation.context.span_id,
    )
    assert len(calls) == len(judge_server.requests) == 3  # opinions, verdicts, reason
    for call in calls:
        a = call.attributes
        assert call.name == "chat openai/scripted-judge"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "openai/scripted-judge"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["spanjudge.judge.retries"] == 0
        assert call.end_time >= call.start_time
    prompts = [json.loads(c.attributes["gen_ai.input.messages"]) for c in calls]
    completions = [json.loads(c.attributes["gen_ai.output.messages"]) for c in calls]
    # the prompt the judge was sent quotes the judged answer; the completion is what it said
    assert any(ANSWER in part["content"] for p in prompts for m in p for part in m["parts"])
    assert any(REASON in part["content"] for c in completions for m in c for part in m["parts"])
    assert all(m["role"] == "assistant" for c in completions for m in c)
    assert all(m["finish_reason"] == "stop" for c in completions for m in c)
    assert all(tuple(c.attributes["gen_ai.response.finish_reasons"]) == ("stop",) for c in calls)
    # the app's trace holds the evaluation span only: no judge span went into it
    in_app = [s for s in spans if f"{s.context.trace_id:032x}" == app_trace]
    assert in_app == [evaluation]
    # the link is kept with the result: the store round-trips the judge trace's ids
    assert (result.judge_trace_id, result.judge_span_id) == (
        f"{root.context.trace_id:032x}",
        f"{root.context.span_id:016x}",
    )


def test_judge_tracing_off_makes_no_judge_spans_no_links_and_no_trace_objects(
    store: SpanStore, judge_server: ScriptedJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Any] = []
    real = judge_trace.JudgeTrace.start
    monkeypatch.setattr(
        judge_trace.JudgeTrace, "start", lambda self, *a: made.append(a) or real(self, *a)
    )
    spans, _, result = evaluate(store, judge_server.judge())
    [evaluation] = spans
    assert evaluation.name == "evaluation bias" and list(evaluation.links) == []
    assert result.judge_trace_id is None and result.judge_span_id is None
    assert made == [] and judge_server.requests  # the judge was called, untraced


def test_a_sample_rate_of_zero_traces_nothing(
    store: SpanStore, judge_server: ScriptedJudgeServer
) -> None:
    spans, _, _ = evaluate(
        store, judge_server.judge(), judge_tracing=True, judge_trace_sample_rate=0.0
    )
    assert [s.name for s in spans] == ["evaluation bias"]


def test_without_content_capture_judge_spans_carry_no_text(
    store: SpanStore, judge_server: ScriptedJudgeServer
) -> None:
    spans, _, _ = evaluate(
        store, judge_server.judge(), judge_tracing=True, judge_trace_content=False
    )
    [evaluation] = by_name(spans, "evaluation")
    root, *calls = follow(spans, evaluation)
    assert calls
    for call in calls:
        assert "gen_ai.input.messages" not in call.attributes
        assert "gen_ai.output.messages" not in call.attributes
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
    text = json.dumps([dict(s.attributes) for s in [root, *calls]])
    assert ANSWER not in text and REASON not in text


def test_the_content_environment_switch_also_turns_text_off(
    store: SpanStore, judge_server: ScriptedJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanjudge.tracer import _capture as capture

    monkeypatch.setattr(capture.POLICY, "content", False)
    spans, _, _ = evaluate(store, judge_server.judge(), judge_tracing=True)
    calls = by_name(spans, "chat ")
    assert calls and all("gen_ai.input.messages" not in c.attributes for c in calls)


def test_a_retried_call_is_one_span_counting_its_retries_and_calls_are_capped(
    store: SpanStore, judge_server: ScriptedJudgeServer
) -> None:
    judge_server.clear()
    judge_server.add_rule(Fault.status(503), times=1)
    script(judge_server)
    judge = judge_server.judge(backoff_base=0.01)
    spans, _, _ = evaluate(store, judge, judge_tracing=True, judge_trace_max_calls=1)
    [evaluation] = by_name(spans, "evaluation")
    root, *calls = follow(spans, evaluation)
    [call] = calls  # capped at one; the other call is counted on the root
    assert call.attributes["spanjudge.judge.retries"] == 1
    assert root.attributes["spanjudge.judge.calls_dropped"] >= 1


def test_a_failed_call_is_an_error_span() -> None:
    trace = judge_trace.JudgeTrace("bias")
    call = trace.start("m", [{"role": "user", "content": "hi"}], None)
    trace.end(call, error=RuntimeError("boom"))
    _, span = trace.spans(1, 2, ScoreEmitter(span_exporter=InMemorySpanExporter()).resource)
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "RuntimeError"
    assert "gen_ai.output.messages" not in span.attributes
    assert json.loads(span.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"] == "hi"
