"""Judge faults through the online loop: one target's judge misbehaves, the others do not.

Each case drives a Monitor over a SQLite store holding three agent turns (three traces). Two turns
(agent "support") go to a healthy scripted judge; one turn (agent "flaky") goes, through a rule
filter, to a judge that faults. The clock is ours, so a transient fault is retried in later ticks
(``retry_delay_seconds``) without sleeping. Per case the test checks the judge requests made,
the stored result, the evaluation span the OTLP sink received and the Prometheus counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge._store import open_store
from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.testing import Fault, ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.loop.conftest import App
from tests.reliability.app import ANSWER, agent, flaky_agent
from tests.reliability.probes import NO_OPINIONS, prom
from tests.support.ports import closed_port

MAX_ATTEMPTS = 3  # monitor: attempts of one job across ticks
JUDGE_RETRIES = 1  # judge: HTTP retries inside one judge call
OUTPUT_ATTEMPTS = 2  # judge: answers asked for before invalid output is an error
RETRY_DELAY = 5.0
PER_ATTEMPT = 1 + JUDGE_RETRIES  # HTTP requests one monitor attempt makes on a transient fault


@dataclass(frozen=True)
class Case:
    """What the flaky target's judge answers to the Opinions step, and what must come of it."""

    respond: Any  # the faulty server's answer; None: the judge points at a closed port
    times: int | None  # faulty answers before the server heals; None: it never does
    status: str  # the flaky target's final result: "scored" | "error"
    error_type: str | None
    requests: int  # HTTP requests the flaky target's judge made in all
    ticks: int  # the tick in which the flaky target's result is stored
    latency: float = 0.0
    judge: dict[str, Any] = field(default_factory=dict)


CASES = {
    "429 with Retry-After, never clears": Case(
        Fault.status(429, retry_after=0), None, "error", "judge_rate_limited",
        MAX_ATTEMPTS * PER_ATTEMPT, MAX_ATTEMPTS,
    ),
    "429 without Retry-After, clears in the second tick": Case(
        Fault.status(429), PER_ATTEMPT + 1, "scored", None, PER_ATTEMPT + 2, 2,
    ),
    "500s, never clear": Case(
        Fault.status(500), None, "error", "judge_server_error",
        MAX_ATTEMPTS * PER_ATTEMPT, MAX_ATTEMPTS,
    ),
    "503 once, retried inside the judge call": Case(Fault.status(503), 1, "scored", None, 2, 1),
    "connection refused": Case(
        None, None, "error", "judge_connection", MAX_ATTEMPTS * PER_ATTEMPT, MAX_ATTEMPTS,
    ),
    "hang past the judge timeout": Case(
        Fault.hang(20), None, "error", "judge_timeout", MAX_ATTEMPTS * PER_ATTEMPT, MAX_ATTEMPTS,
        judge={"timeout": 0.3},
    ),
    "slow answer within the timeout": Case(
        NO_OPINIONS, None, "scored", None, 1, 1, latency=0.3, judge={"timeout": 10.0}
    ),
    "truncated JSON": Case(
        Fault.malformed('{"opinions": ["unterminated'), None, "error", "judge_invalid_response",
        OUTPUT_ATTEMPTS, 1,
    ),
    "truncated JSON once, repaired": Case(
        Fault.malformed('{"opinions": ["unterminated'), 1, "scored", None, 2, 1
    ),
    "JSON with wrong keys": Case(
        {"facts": ["The customer is always right."]}, None, "error", "judge_invalid_response",
        OUTPUT_ATTEMPTS, 1,
    ),
    "refusal text": Case(
        "I'm sorry, but I can't help with that request.", None, "error",
        "judge_invalid_response", OUTPUT_ATTEMPTS, 1,
    ),
}  # fmt: skip


@contextmanager
def faulty_judge(case: Case) -> Iterator[tuple[LiteLLMJudge, ScriptedJudgeServer | None]]:
    options: dict[str, Any] = {
        "timeout": 10.0,
        "max_retries": JUDGE_RETRIES,
        "max_output_attempts": OUTPUT_ATTEMPTS,
        "backoff_base": 0.01,
        "max_backoff": 0.05,
        **case.judge,
    }
    if case.respond is None:
        url = f"http://127.0.0.1:{closed_port()}/v1"
        yield LiteLLMJudge("openai/scripted-judge", api_base=url, api_key="sk-x", **options), None
        return
    with ScriptedJudgeServer() as server:
        server.add_rule(case.respond, schema="Opinions", times=case.times, latency=case.latency)
        server.add_rule(NO_OPINIONS, schema="Opinions")  # healed
        yield server.judge(**options), server


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_one_faulty_target_never_stops_the_loop_nor_gets_a_score_from_garbage(
    case: Case,
    route_spans: Any,
    clock: Any,
    tmp_path: Any,
    healthy_judge_server: ScriptedJudgeServer,
    sink: Any,
    registry: Any,
    telemetry: Any,
) -> None:
    """Expected: the healthy targets are scored in the first tick whatever the fault; the flaky
    target's transient faults are retried in later ticks (none before ``retry_delay_seconds``),
    at most ``max_attempts`` times; it ends with exactly one result, scored when the fault
    cleared, else ``status="error"`` with ``error_type`` and no score, in the store, on its
    evaluation span (``error.type``, status ERROR, no score value) and in
    ``spanjudge_evaluations_total{label="error"}``."""
    store = open_store(f"sqlite:///{tmp_path}/spans.db")
    app = App(store, clock)
    route_spans(app.processor)
    try:
        for i in range(2):
            agent(f"Healthy question {i} about returns?", ANSWER)
        flaky_agent("Flaky question about returns?", ANSWER)
        app.flush()
        clock.advance(11)  # settled
        with faulty_judge(case) as (judge, server):
            rules = [
                Rule(
                    BiasMetric(model=healthy_judge_server.judge(timeout=10.0)),
                    target="agent",
                    filter={"agent": "support"},
                    name="bias-healthy",
                ),
                Rule(
                    BiasMetric(model=judge),
                    target="agent",
                    filter={"agent": "flaky"},
                    name="bias-flaky",
                ),
            ]
            mon = Monitor(
                rules,
                store=store,
                emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url)),
                telemetry=telemetry,
                clock=clock,
                config=MonitorConfig(
                    settle_seconds=10,
                    max_attempts=MAX_ATTEMPTS,
                    retry_delay_seconds=RETRY_DELAY,
                    retention_seconds=None,
                ),
            )
            first = mon.tick()
            assert first.claimed == 3
            healthy = store.results(rule="bias-healthy")
            assert [(r.status, r.score) for r in healthy] == [("scored", 0.0)] * 2
            retries = first.retried
            final_tick = 1 if store.results(rule="bias-flaky") else 0
            for attempt in range(1, MAX_ATTEMPTS + 1):
                if final_tick:
                    break
                assert mon.tick().claimed == 0, "a released job ran before its retry delay"
                clock.advance(RETRY_DELAY * attempt)
                report = mon.tick()
                assert report.claimed == 1
                retries += report.retried
                if store.results(rule="bias-flaky"):
                    final_tick = attempt + 1
            clock.advance(1000)
            assert mon.tick().claimed == 0  # nothing left: the job is finished, not lost
            mon.close()
            requests = len(server.requests) if server is not None else judge.attempts
            assert judge.attempts == requests
        assert requests == case.requests, f"judge requests for the flaky target: {requests}"
        assert final_tick == case.ticks and retries == case.ticks - 1
        assert len(healthy_judge_server.requests) == 2  # never retried, never repeated

        results = store.results()
        keys = [(r.rule, r.target_id) for r in results]
        assert len(keys) == 3 and len(set(keys)) == 3
        (flaky,) = store.results(rule="bias-flaky")
        assert flaky.status == case.status
        if case.status == "error":
            assert flaky.error_type == case.error_type
            assert (flaky.score, flaky.label, flaky.success) == (None, None, None)
        else:
            assert flaky.error_type is None and flaky.score == 0.0 and flaky.label == "pass"

        # on the wire: one evaluation span per target, flaky one carrying the error, no score
        assert len(sink.spans) == 3
        assert {s.span_id for s in sink.spans} == {r.evaluation_span_id for r in results}
        (span,) = [s for s in sink.spans if s.span_id == flaky.evaluation_span_id]
        (_, event) = span.events[0]
        if case.status == "error":
            assert span.attributes[attrs.ERROR_TYPE] == case.error_type
            assert attrs.GEN_AI_EVALUATION_SCORE_VALUE not in span.attributes
            assert attrs.GEN_AI_EVALUATION_SCORE_LABEL not in span.attributes
            assert attrs.GEN_AI_EVALUATION_SCORE_VALUE not in event
            assert span.status_code == 2  # ERROR
        else:
            assert attrs.ERROR_TYPE not in span.attributes
            assert span.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0
        for other in sink.spans:
            if other is not span:
                assert other.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0

        # telemetry: one evaluation counted per target, the error under label="error"
        total = "spanjudge_evaluations_total"
        is_error = case.status == "error"
        assert prom(registry, total, rule="bias-flaky", label="error") == int(is_error)
        assert prom(registry, total, rule="bias-flaky", label="pass") == int(not is_error)
        assert prom(registry, total, rule="bias-healthy", label="pass") == 2
        assert prom(registry, total, label="error") == int(is_error)
        assert prom(registry, "spanjudge_evaluation_score_count", rule="bias-flaky") == int(
            not is_error
        )
    finally:
        app.exporter.shutdown()
        store.close()
