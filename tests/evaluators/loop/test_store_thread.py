"""A slow store call does not stop the judge calls in flight: the monitor runs the store side of
its jobs on a thread of its own, so judge answers are read (and the next judge call is sent)
while a result is being written. On the event loop, such calls stalled every judge answer of the
worker by 26 ms on average (benchmarks/README.md, Worker)."""

from __future__ import annotations

import threading
from typing import Any

from spanjudge.errors import StoreError
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import observe


@observe(kind="agent", name="support")
def agent(question: str) -> str:
    return f"Answer {question}"


def two_settled_turns_and_a_monitor(
    app: Any, store: Any, clock: Any, server: ScriptedJudgeServer, **config: Any
) -> Monitor:
    """Agent turns "alpha" and "beta", settled, and a monitor with a bias rule on them."""
    agent("alpha")
    agent("beta")
    app.flush()
    clock.advance(30)
    return Monitor(
        [Rule(BiasMetric(model=server.judge()), target="agent", name="bias")],
        store=store,
        clock=clock,
        config=MonitorConfig(settle_seconds=10, retention_seconds=None, **config),
    )


def test_a_blocked_result_write_leaves_the_other_evaluation_running(
    app: Any, store: Any, clock: Any
) -> None:
    # alpha is judged in one call and stored; its write blocks until beta's evaluation has
    # read its first answer and sent its second call, which only happens if the event loop
    # is free while alpha's result is written
    writing_alpha = threading.Event()
    beta_went_on = threading.Event()
    waited: list[bool] = []
    threads: dict[str, str] = {}

    def beta_opinions(request: Any) -> dict[str, list[str]]:
        writing_alpha.wait(10)
        return {"opinions": ["Beta is the best plan there is."]}

    def verdicts(request: Any) -> dict[str, Any]:
        beta_went_on.set()
        return {"verdicts": [{"verdict": "no", "reason": "A preference, not a bias."}]}

    complete_job = store.complete_job

    def slow_complete_job(job_id: int, **kw: Any) -> bool:
        threads.setdefault(kw["record"].target_id, threading.current_thread().name)
        if not writing_alpha.is_set():
            writing_alpha.set()
            waited.append(beta_went_on.wait(10))
        return bool(complete_job(job_id, **kw))

    store.complete_job = slow_complete_job
    with ScriptedJudgeServer() as server:
        server.add_rule(lambda r: {"opinions": []}, schema="Opinions", contains="Answer alpha")
        server.add_rule(beta_opinions, schema="Opinions", contains="Answer beta")
        server.add_rule(verdicts, schema="BiasVerdicts")
        server.add_rule(lambda r: {"reason": "No bias found."}, schema="Reason")
        mon = two_settled_turns_and_a_monitor(app, store, clock, server, concurrency=2)
        try:
            report = mon.tick()
        finally:
            mon.close()

    assert waited == [True], "beta's judge answer waited for alpha's result write"
    assert report.claimed == 2 and report.scored == 2
    assert sorted(r.status for r in store.results(rule="bias")) == ["scored"] * 2
    assert set(threads.values()) == {"spanjudge-store_0"}, threads


def test_a_store_failure_while_loading_gives_the_job_back_instead_of_skipping_it(
    app: Any, store: Any, clock: Any
) -> None:
    # a connection lost while a job's spans are read (CI saw it: PostgreSQL connections killed
    # while another job was being judged) is the store's failure, not missing spans: the job
    # is retried in a later tick and scored, never recorded as "target spans not found"
    trace_spans = store.trace_spans
    failures: list[str] = []

    def flaky_trace_spans(trace_id: str) -> Any:
        if not failures:
            failures.append(trace_id)
            raise StoreError(
                "PostgreSQL store: terminating connection due to administrator command"
            )
        return trace_spans(trace_id)

    store.trace_spans = flaky_trace_spans
    with ScriptedJudgeServer() as server:
        server.add_rule(lambda r: {"opinions": []}, schema="Opinions")
        mon = two_settled_turns_and_a_monitor(app, store, clock, server, interval_seconds=5)
        try:
            first = mon.tick()
            assert (first.claimed, first.scored, first.retried, first.missing) == (2, 1, 1, 0)
            assert [r.status for r in store.results(rule="bias")] == ["scored"]
            clock.advance(5)  # the job is due again a tick later
            second = mon.tick()
        finally:
            mon.close()

    assert (second.claimed, second.scored) == (1, 1)
    results = store.results(rule="bias")
    assert sorted(r.status for r in results) == ["scored", "scored"]
    assert len({r.target_id for r in results}) == 2 and len(failures) == 1
