"""Structured-output negotiation, log-probabilities and unpriced models, through litellm's real
HTTP path to scripted servers that take only what the servers they mimic take."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from spanjudge.errors import JudgeError, JudgeResponseError
from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
from spanjudge.evaluators._judge.judges.structured import NEGOTIATOR, pick_form, refuses
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.test_case import LLMTestCase
from spanjudge.testing import ScriptedJudgeServer


class Score(BaseModel):
    score: int = Field(ge=0, le=10)
    reason: str


ANSWER = {"score": 8, "reason": "ok"}


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    NEGOTIATOR.forget()
    yield
    NEGOTIATOR.forget()


def serve(profile: str) -> ScriptedJudgeServer:
    server = ScriptedJudgeServer(profile=profile).start()
    server.add_rule(ANSWER, schema="Score")
    return server


def judge_for(server: ScriptedJudgeServer, **options: Any) -> LiteLLMJudge:
    judge: LiteLLMJudge = server.judge(timeout=10.0, backoff_base=0.01, max_backoff=0.05, **options)
    return judge


def forms(server: ScriptedJudgeServer) -> list[tuple[str, int]]:
    return [(r.form, r.status) for r in server.requests]


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        ("openai", [("json_schema", 200)]),
        ("llama.cpp", [("json_schema", 400), ("json_object", 200)]),
        ("llama-cpp-python", [("json_schema", 500), ("json_object", 200)]),
        ("tools-only", [("json_schema", 400), ("json_object", 400), ("tools", 200)]),
        (
            "plain",
            [("json_schema", 422), ("json_object", 422), ("tools", 422), ("prompt", 200)],
        ),
    ],
)
def test_each_server_gets_the_best_form_it_takes_and_it_is_remembered(
    profile: str, expected: list[tuple[str, int]]
) -> None:
    server = serve(profile)
    try:
        judge = judge_for(server)
        obj, usage = judge.generate("Rate the answer.", Score)
        assert obj == Score(**ANSWER)
        # refusals are negotiation, not attempts: one answer counted, no backoff retries
        assert usage.calls == 1
        assert forms(server) == expected
        # learnt once: the next call (even from another judge object) goes straight there
        LiteLLMJudge(judge.model_name, api_base=server.base_url).generate("Again.", Score)
        assert forms(server)[-1] == expected[-1]
        assert len(server.requests) == len(expected) + 1
    finally:
        server.stop()


def test_json_object_form_carries_the_schema_and_tools_form_is_read_from_the_call() -> None:
    server = serve("tools-only")
    try:
        judge_for(server, structured_output="json_object")
        # a pinned form is not negotiated: the refusal is the call's error, not retried
        with pytest.raises(JudgeError, match="not supported"):
            judge_for(server, structured_output="json_object").generate("x", Score)
        assert forms(server) == [("json_object", 400)]
        assert server.requests[0].body["response_format"]["schema"]["title"] == "Score"
        obj, _ = judge_for(server, structured_output="tools").generate("x", Score)
        assert obj.score == 8
        body = server.requests[-1].body
        assert body["tool_choice"]["function"]["name"] == "Score"
        assert body["tools"][0]["function"]["parameters"]["properties"]["score"]["maximum"] == 10
    finally:
        server.stop()


def test_async_negotiation_under_concurrency_settles_on_one_form() -> None:
    server = serve("llama.cpp")
    try:
        judge = judge_for(server)

        async def many() -> list[Any]:
            return list(await asyncio.gather(*(judge.a_generate("x", Score) for _ in range(12))))

        answers = asyncio.run(many())
        assert all(obj.score == 8 for obj, _ in answers)
        refused = [f for f, status in forms(server) if status != 200]
        assert set(refused) == {"json_schema"} and len(refused) <= 12
        assert {f for f, status in forms(server) if status == 200} == {"json_object"}
    finally:
        server.stop()


def test_step_down_is_logged_with_the_endpoint_and_never_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = serve("llama.cpp")
    try:
        with caplog.at_level(logging.INFO, logger="spanjudge.judge"):
            judge_for(server, api_key="sk-secret-do-not-log-1234").generate("x", Score)
        text = caplog.text
        assert "refused structured output 'json_schema'" in text and server.base_url in text
        assert "sk-secret-do-not-log-1234" not in text
    finally:
        server.stop()


def test_a_400_about_something_else_is_an_error_not_a_step_down() -> None:
    class Refusal(Exception):
        status_code = 400

    assert refuses(Refusal("response_format json_schema is not supported"), "json_schema")
    assert refuses(Refusal("tools are not supported"), "tools")
    assert not refuses(Refusal("maximum context length exceeded"), "json_schema")
    assert not refuses(Refusal("anything"), "prompt")

    class ServerError(Exception):
        status_code = 500

    assert not refuses(ServerError("response_format: internal error"), "json_schema")
    assert refuses(
        ServerError("1 validation error: 'response_format' Input should be 'text'"), "json_schema"
    )


def test_structured_output_setting_is_validated() -> None:
    assert pick_form(None) == "auto" and pick_form(True) == "json_schema"
    assert pick_form(False) == "prompt" and pick_form("TOOLS") == "tools"
    with pytest.raises(ValueError, match="structured_output must be one of"):
        pick_form("grammar")


def test_logprobs_returned_when_offered_and_dropped_once_when_refused() -> None:
    server = ScriptedJudgeServer(profile="openai").start()
    plain = ScriptedJudgeServer(profile="ollama").start()
    try:
        for s in (server, plain):
            s.add_rule(ANSWER, schema="Score", logprobs={"8": {"8": -0.2231, "7": -1.6094}})
        answer = judge_for(server).generate_answer("x", Score, top_logprobs=5)
        assert answer.logprobs is not None
        eight = next(t for t in answer.logprobs if t.token == "8")
        assert eight.logprob == pytest.approx(-0.2231) and dict(eight.top)["7"] == -1.6094
        assert server.requests[-1].body["top_logprobs"] == 5
        # not asked for: not requested
        judge_for(server).generate("x", Score)
        assert "logprobs" not in server.requests[-1].body

        judge = judge_for(plain)
        first = judge.generate_answer("x", Score, top_logprobs=5)
        assert first.logprobs is None and first.value.score == 8
        judge.generate_answer("x", Score, top_logprobs=5)
        asked = [bool(r.body.get("logprobs")) for r in plain.requests]
        assert asked == [True, False, False]  # refused once, then never asked again
    finally:
        server.stop()
        plain.stop()


def test_unpriced_model_costs_zero_with_tokens_and_says_so() -> None:
    server = serve("openai")
    try:
        _, usage = judge_for(server).generate("x", Score)
        assert usage.cost == 0.0 and usage.unpriced_calls == 1
        assert usage.input_tokens > 0 and usage.output_tokens > 0
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"score": 11, "reason": "x"}, "score"),
        ({"score": "high", "reason": "x"}, "score"),
    ],
)
def test_valid_json_out_of_range_is_repaired_then_an_error_naming_the_field(
    bad: dict[str, Any], field: str
) -> None:
    server = ScriptedJudgeServer(profile="llama.cpp").start()
    try:
        server.add_rule(bad, schema="Score")
        with pytest.raises(JudgeResponseError) as caught:
            judge_for(server).generate("x", Score)
        assert f"{field}:" in str(caught.value)
        answered = [r for r in server.requests if r.status == 200]
        assert len(answered) == 3  # every output attempt used, each repair quoting the problem
        assert f"{field}:" in answered[-1].prompt
    finally:
        server.stop()


def test_verdict_word_outside_the_allowed_set_is_never_coerced() -> None:
    server = ScriptedJudgeServer(profile="llama-cpp-python").start()
    try:
        server.add_rule({"opinions": ["Cats are better."]}, schema="Opinions")
        server.add_rule({"verdicts": [{"verdict": "maybe", "reason": "?"}]}, schema="BiasVerdicts")
        metric = BiasMetric(model=judge_for(server))
        case = LLMTestCase(input="?", actual_output="Cats are better.")
        with pytest.raises(Exception, match="verdict"):
            metric.measure(case)
        assert metric.score is None and metric.error_type == "judge_invalid_response"
    finally:
        server.stop()


def test_verdict_counts_are_in_the_schema_sent_for_constrained_decoding() -> None:
    server = ScriptedJudgeServer(profile="llama.cpp").start()
    try:
        server.add_rule({"truths": ["Refunds take 30 days."]}, schema="Truths")
        server.add_rule({"claims": ["Refunds take 90 days.", "Shoes are red."]}, schema="Claims")
        server.add_rule(
            {"verdicts": [{"verdict": "no", "reason": "30"}, {"verdict": "idk"}]},
            schema="FaithfulnessVerdicts",
        )
        server.add_rule({"reason": "r"}, schema="Reason")
        metric = FaithfulnessMetric(model=judge_for(server))
        metric.measure(
            LLMTestCase(input="?", actual_output="x", retrieval_context=["Refunds take 30 days."])
        )
        sent = next(r for r in server.requests if r.schema_name == "FaithfulnessVerdicts")
        verdicts = sent.body["response_format"]["schema"]["properties"]["verdicts"]
        assert verdicts["minItems"] == verdicts["maxItems"] == 2
        assert metric.score == 0.5
    finally:
        server.stop()


def test_raw_newlines_inside_json_strings_are_read_not_rejected() -> None:
    # llama.cpp's JSON grammar lets a small model put a raw newline inside a string; strict JSON
    # parsing refused it ("no JSON object found") and the evaluation failed after 3 attempts
    server = ScriptedJudgeServer(profile="llama.cpp").start()
    try:
        server.add_rule('{"score": 8, "reason": "The\nassistant declined."}', schema="Score")
        obj, usage = judge_for(server).generate("x", Score)
        assert obj.reason == "The\nassistant declined." and usage.calls == 1
    finally:
        server.stop()


def test_self_hosted_calls_ask_for_bounded_output_and_hosted_ones_do_not() -> None:
    server = serve("llama.cpp")
    try:
        judge_for(server).generate("x", Score)
        assert server.requests[-1].body["max_tokens"] == 2048  # a server of your own
        judge_for(server, max_output_tokens=300).generate("x", Score)
        assert server.requests[-1].body["max_tokens"] == 300
    finally:
        server.stop()
    assert LiteLLMJudge("gpt-4o-mini").output_limit() is None  # hosted: no limit unless set
    assert LiteLLMJudge("gpt-4o-mini", max_output_tokens=500).output_limit() == 500
    with pytest.raises(ValueError, match="max_output_tokens must be >= 1"):
        LiteLLMJudge("openai/x", api_base="http://127.0.0.1:1/v1", max_output_tokens=0)
