"""Real deepeval 4.3.1 metrics as rules, end to end: spans in the store -> the Monitor (sampling,
leases, exactly-once delivery) -> deepeval's own metric code, judged through
``as_deepeval_model`` by our engine against a scripted judge on 127.0.0.1 -> results, evaluation
spans and events. Nothing here reaches a hosted model."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from deepeval.metrics import (
    AnswerRelevancyMetric,
    BaseMetric,
    TurnRelevancyMetric,
)
from deepeval.metrics import BiasMetric as DeepEvalBias
from deepeval.models import DeepEvalBaseLLM

from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.deepeval_bridge.metric import DeepEvalMetric
from spanjudge.evaluators._judge.deepeval_bridge.model import as_deepeval_model
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import Fault, ScriptedJudgeServer, ScriptedRequest
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.cache.conftest import Loop, write_traces
from tests.evaluators.online.spans import Trace
from tests.support.clock import Clock

QUESTION = "Can I return my shoes?"
ANSWER = "Yes, within 30 days. Also, football is great."


def script_answer_relevancy(server: ScriptedJudgeServer) -> None:
    server.add_rule(
        {"statements": ["Returns are accepted within 30 days.", "Football is great."]},
        schema="Statements",
    )
    server.add_rule(
        {"verdicts": [{"verdict": "yes"}, {"verdict": "no", "reason": "football is off topic"}]},
        schema="Verdicts",
    )
    server.add_rule({"reason": "Half the answer is about football."}, schema="AnswerRelevancy"
                    "ScoreReason")  # fmt: skip


def relevancy_rule(judge: Any, **options: Any) -> Rule:
    metric = AnswerRelevancyMetric(threshold=0.7, model=as_deepeval_model(judge))
    return Rule(metric, target="agent", **options)


def test_a_single_turn_deepeval_metric_scores_spans_end_to_end(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    write_traces(store, clock, [ANSWER])
    with ScriptedJudgeServer() as server:
        script_answer_relevancy(server)
        rule = relevancy_rule(server.judge())
        unsampled = relevancy_rule(server.judge(), name="never", sample_rate=0.0)
        report = loop.monitor(store, [rule, unsampled]).tick()
        schemas = [r.schema_name for r in server.requests]
        prompts = [r.prompt for r in server.requests]
    assert report.scored == 1 and report.errors == 0
    assert schemas == ["Statements", "Verdicts", "AnswerRelevancyScoreReason"]
    assert ANSWER in prompts[0]  # our rebuilt case reached deepeval's prompt
    [result] = store.results()
    assert result.rule == "deepeval_answer_relevancy-agent"
    assert result.metric == "deepeval_answer_relevancy"
    assert (result.score, result.label, result.success) == (0.5, "fail", False)
    assert result.threshold == 0.7
    assert result.reason == "Half the answer is about football."
    assert result.judge_model == "openai/scripted-judge"
    assert result.judge_calls == 3 and result.input_tokens > 0 and result.output_tokens > 0
    assert [v["verdict"] for v in result.verdicts or []] == ["yes", "no"]

    [span] = loop.sink.wait_for(lambda got: len(got) >= 1)
    [event] = loop.sink.wait_for_logs(lambda got: len(got) >= 1)
    turn = next(s for s in store.trace_spans(result.trace_id or "") if s.is_root)
    assert span.name == "evaluation deepeval_answer_relevancy"
    assert span.parent_span_id == turn.span_id
    for attributes in (span.attributes, event.attributes):
        assert attributes[attrs.GEN_AI_EVALUATION_NAME] == "deepeval_answer_relevancy"
        assert attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.5
        assert attributes[attrs.SPANJUDGE_EVAL_JUDGE_MODEL] == "openai/scripted-judge"

    again = loop.monitor(store, [relevancy_rule(server.judge())])
    assert again.tick().claimed == 0  # exactly once: nothing is evaluated twice
    assert len(loop.sink.spans) == 1


def test_a_conversational_deepeval_metric_scores_a_conversation_end_to_end(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    turns = [("I want to return my shoes.", "Sure, send them back within 30 days."),
             ("How long do refunds take?", "Brazil will win the world cup.")]  # fmt: skip
    for question, answer in turns:
        trace = Trace(service="shop")
        trace.agent(user=question, answer=answer, conversation_id="conv-7")
        store.write_spans(trace.spans, now=clock())
        clock.advance(5)
    clock.advance(60)
    with ScriptedJudgeServer() as server:
        server.add_rule(
            {"verdict": "no", "reason": "off topic"}, schema="TurnRelevancyVerdict",
            contains="Brazil will win",
        )  # fmt: skip
        server.add_rule({"verdict": "yes"}, schema="TurnRelevancyVerdict")
        server.add_rule({"reason": "The last answer drifts."}, schema="TurnRelevancyScoreReason")
        metric = TurnRelevancyMetric(threshold=0.8, model=as_deepeval_model(server.judge()))
        rule = Rule(metric, target="conversation")
        report = loop.monitor(store, [rule], idle_seconds=10).tick()
        schemas = sorted(r.schema_name or "" for r in server.requests)
    assert report.scored == 1
    assert schemas == ["TurnRelevancyScoreReason", "TurnRelevancyVerdict", "TurnRelevancyVerdict"]
    [result] = store.results()
    assert (result.metric, result.target_type, result.target_id) == (
        "deepeval_turn_relevancy",
        "conversation",
        "conv-7",
    )
    assert (result.score, result.label) == (0.5, "fail")
    assert result.reason == "The last answer drifts."
    [event] = loop.sink.wait_for_logs(lambda got: len(got) >= 1)
    assert event.attributes[attrs.GEN_AI_EVALUATION_NAME] == "deepeval_turn_relevancy"


def test_a_conversational_metric_on_a_single_turn_target_is_refused_at_construction() -> None:
    with ScriptedJudgeServer() as server:
        model = as_deepeval_model(server.judge())
        with pytest.raises(ValueError, match="conversational and needs target='conversation'"):
            Rule(TurnRelevancyMetric(model=model), target="agent")
        with pytest.raises(ValueError, match="scores single turns"):
            Rule(AnswerRelevancyMetric(model=model), target="conversation")


class Exploding(BaseMetric):  # type: ignore[misc]
    """A deepeval metric whose measurement raises."""

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold

    def measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        raise RuntimeError("the metric exploded")

    async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        raise RuntimeError("the metric exploded")

    def is_successful(self) -> bool:
        return False

    @property
    def __name__(self) -> str:
        return "Exploding"


def test_a_raising_metric_or_judge_is_an_error_result_never_a_score(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    write_traces(store, clock, [ANSWER])
    with ScriptedJudgeServer() as server:
        server.add_rule(Fault.malformed("this is not JSON"))
        judge = server.judge(max_output_attempts=1)
        rules = [
            Rule(Exploding(), target="agent"),
            Rule(DeepEvalBias(model=as_deepeval_model(judge)), target="agent"),
        ]
        report = loop.monitor(store, rules).tick()
    assert report.errors == 2 and report.scored == 0
    results = {r.metric: r for r in store.results()}
    exploded = results["deepeval_exploding"]
    assert (exploded.status, exploded.score, exploded.label) == ("error", None, None)
    assert exploded.error_type == "evaluation_error"
    assert "the metric exploded" in (exploded.error_message or "")
    bias = results["deepeval_bias"]
    assert (bias.status, bias.score, bias.error_type) == ("error", None, "judge_invalid_response")
    spans = loop.sink.wait_for(lambda got: len(got) >= 2)
    for span in spans:
        assert attrs.GEN_AI_EVALUATION_SCORE_VALUE not in span.attributes
        assert span.attributes[attrs.ERROR_TYPE] in ("evaluation_error", "judge_invalid_response")


def _question(request: ScriptedRequest) -> str:
    found = re.search(r"question-\d", request.prompt)
    return found.group(0) if found else "none"


def test_concurrent_jobs_each_measure_a_fresh_copy(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    for n in range(4):
        trace = Trace(service="shop")
        answer = f"Answer {n}: " + ("on topic" if n % 2 else "bad and off topic")
        trace.agent(user=f"question-{n}", answer=answer)
        store.write_spans(trace.spans, now=clock())
    clock.advance(60)
    with ScriptedJudgeServer(latency=0.05) as server:
        server.add_rule(
            lambda r: {"statements": ["statement-bad" if "bad and" in r.prompt else "fine"]},
            schema="Statements",
        )
        server.add_rule(
            lambda r: {"verdicts": [{"verdict": "no" if "statement-bad" in r.prompt else "yes"}]},
            schema="Verdicts",
        )
        server.add_rule(lambda r: {"reason": f"about {_question(r)}"}, schema="AnswerRelevancy"
                        "ScoreReason")  # fmt: skip
        metric = AnswerRelevancyMetric(threshold=0.5, model=as_deepeval_model(server.judge()))
        rule = Rule(metric, target="agent")
        report = loop.monitor(store, [rule], concurrency=4).tick()
        assert server.max_in_flight > 1  # the jobs did overlap
    assert report.scored == 4
    for result in store.results():
        [root] = [s for s in store.trace_spans(result.trace_id or "") if s.is_root]
        question = root.attributes[attrs.GEN_AI_INPUT_MESSAGES]
        n = int(re.search(r"question-(\d)", question).group(1))  # type: ignore[union-attr]
        assert result.reason == f"about question-{n}"
        assert result.score == (1.0 if n % 2 else 0.0)
    assert metric.score is None  # the rule's own object was never measured


def test_deepeval_bias_scores_the_other_way_round_from_ours(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    write_traces(store, clock, ["Men are better leaders than women."])
    with ScriptedJudgeServer() as server:
        server.add_rule({"opinions": ["Men are better leaders."]}, schema="Opinions")
        server.add_rule({"verdicts": [{"verdict": "yes", "reason": "gender"}]}, schema="Verdicts")
        server.add_rule({"verdicts": [{"verdict": "yes", "reason": "gender"}]},
                        schema="BiasVerdicts")  # fmt: skip
        server.add_rule({"reason": "Gender bias."})
        judge = server.judge()
        rules = [
            Rule(BiasMetric(model=judge), target="agent"),
            Rule(DeepEvalBias(model=as_deepeval_model(judge)), target="agent"),
        ]
        loop.monitor(store, rules).tick()
    results = {r.metric: r for r in store.results()}
    # one opinion, biased: ours (the documented formula) 1/1 = 1.0, a maximum threshold;
    # deepeval 4.3.1 the share of unbiased opinions, 0.0, a minimum threshold. Both fail.
    assert (results["bias"].score, results["bias"].label) == (1.0, "fail")
    assert (results["deepeval_bias"].score, results["deepeval_bias"].label) == (0.0, "fail")


def test_the_judge_cache_keys_deepeval_metrics_by_their_parameters(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    write_traces(store, clock, [ANSWER])
    with ScriptedJudgeServer() as server:
        script_answer_relevancy(server)
        judge = server.judge()
        loop.monitor(store, [relevancy_rule(judge, name="v1")]).tick()
        loop.monitor(store, [relevancy_rule(judge, name="v2")]).backfill(since=0)
        assert len(server.requests) == 3  # v2 reused v1's result
        other = AnswerRelevancyMetric(threshold=0.9, model=as_deepeval_model(judge))
        loop.monitor(store, [Rule(other, target="agent", name="v3")]).backfill(since=0)
        assert len(server.requests) == 6  # another threshold: judged again
    cached = {r.rule: r.cached for r in store.results()}
    assert cached == {"v1": False, "v2": True, "v3": False}


def test_a_metric_judging_with_its_own_model_is_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class NotSpanjudge(DeepEvalBaseLLM):  # type: ignore[misc]
        """A stand-in custom model (not a real LLM; never called here)."""

        def __init__(self) -> None:
            self.name = "stand-in-model"

        def load_model(self, *args: Any, **kwargs: Any) -> Any:
            return None

        def generate(self, *args: Any, **kwargs: Any) -> str:
            raise AssertionError("never called")

        async def a_generate(self, *args: Any, **kwargs: Any) -> str:
            raise AssertionError("never called")

        def get_model_name(self, *args: Any, **kwargs: Any) -> str:
            return "stand-in-model"

    with caplog.at_level(logging.WARNING, logger="spanjudge.rules"):
        rule = Rule(AnswerRelevancyMetric(model=NotSpanjudge()), target="agent")
    assert isinstance(rule.metric, DeepEvalMetric) and not rule.metric.ours
    assert "stand-in-model" in caplog.text and "as_deepeval_model" in caplog.text


def test_a_case_without_a_field_the_metric_requires_is_skipped_before_any_judge_call(
    store: SpanStore, loop: Loop, clock: Clock
) -> None:
    from deepeval.metrics import FaithfulnessMetric as DeepEvalFaithfulness

    write_traces(store, clock, [ANSWER])  # no retriever span: no retrieval context
    with ScriptedJudgeServer() as server:
        metric = DeepEvalFaithfulness(model=as_deepeval_model(server.judge()))
        report = loop.monitor(store, [Rule(metric, target="agent")]).tick()
        assert server.requests == []
    assert report.missing == 1
    [result] = store.results()
    assert result.status == "skipped" and "retrieval_context" in (result.skip_reason or "")
