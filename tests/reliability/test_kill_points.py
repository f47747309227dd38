"""SIGKILL of an evaluator process at each named point of a job's life, then a fresh monitor.

The victim (tests/reliability/killable_evaluator.py) runs a real Monitor on the test's SQLite
file and stops dead at one point (it writes a marker file and sleeps there); the test SIGKILLs it,
checks what the store holds at that moment, and lets a fresh monitor (its clock a lease later)
finish the work. Each (rule, target) must end with exactly one result, and each target with
exactly one evaluation span id at the OTLP sink: a re-emission after a crash reuses the id.
Both outputs are on: each result must also reach ``/v1/logs`` as a ``gen_ai.evaluation.result``
event, and the heir re-sends to each output only what that output still owes (an output the
victim sent but did not mark is sent again; one it marked is not).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spanjudge._store import open_store
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.loop.conftest import App
from tests.reliability.app import ANSWER, agent
from tests.reliability.killable_evaluator import (
    LEASE,
    MARKED_AT,
    POINTS,
    CannedJudge,
    make_monitor,
)

ROOT = Path(__file__).resolve().parents[2]
TARGETS = 4

# What the victim left behind when it died: (results stored, evaluation spans sent, events
# sent). Spans and events go out together, so the counts of sent spans and events agree.
LEFT_BEHIND = {
    "before_claim": (0, 0, 0),
    "mid_judge": (0, 0, 0),
    "after_complete": (1, 0, 0),  # the first job's result, stored and not emitted
    "mid_emit": (TARGETS, TARGETS, TARGETS),  # every result stored and sent, none marked
    "span_marked": (TARGETS, TARGETS, TARGETS),  # ... the span output marked
    "event_marked": (TARGETS, TARGETS, TARGETS),  # ... the event output marked
}


def kill_at(point: str, store_url: str, sink_endpoint: str, offset: float, tmp_path: Path) -> None:
    marker = tmp_path / f"{point}.reached"
    victim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.reliability.killable_evaluator",
            store_url,
            sink_endpoint,
            str(offset),
            point,
            str(marker),
        ],
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            if victim.poll() is not None:
                err = victim.stderr.read().decode()[-2000:] if victim.stderr else ""
                raise AssertionError(f"the victim exited before {point}: {err}")
            assert time.monotonic() < deadline, f"the victim never reached {point}"
            time.sleep(0.02)
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_point_then_a_fresh_monitor_finishes_exactly_once(
    point: str, route_spans: Any, clock: Any, sink: Any, tmp_path: Path
) -> None:
    """Expected: whatever point the evaluator dies at, a fresh monitor a lease later judges
    only the targets without a stored result, re-emits stored-but-unconfirmed results, and in
    the end every target has exactly one result row and exactly one distinct evaluation span id
    at the sink; only a kill mid-emit re-sends a span, with the same id."""
    store_url = f"sqlite:///{tmp_path}/spans.db"
    store = open_store(store_url)
    app = App(store, clock)
    route_spans(app.processor)
    for i in range(TARGETS):
        agent(f"Question {i} about returns?", ANSWER)
    app.flush()
    offset = clock.now + 11 - time.time()  # the victim's clock: our spans have settled

    kill_at(point, store_url, sink.endpoint, offset, tmp_path)

    stored, sent, events_sent = LEFT_BEHIND[point]
    marked = MARKED_AT.get(point)
    owed = {o: 0 if o == marked else stored for o in ("span", "event")}
    assert len(store.results()) == stored
    assert len(sink.spans) == sent
    assert len(sink.logs) == events_sent
    for output in ("span", "event"):  # only what the victim marked counts as delivered
        assert len(store.unemitted_results(outputs=[output])) == owed[output], output
    stats = store.stats(now=clock.now + 11)
    if point == "before_claim":
        assert (stats.pending, stats.leased) == (TARGETS, 0)  # planned, never claimed
    else:
        assert stats.leased == TARGETS - stored  # leases of a dead process

    judge = CannedJudge()
    heir = make_monitor(
        store, sink.endpoint, lambda: time.time() + offset + LEASE + 1, judge
    )  # a lease later: the victim's leases expired, its results are orphans
    report = heir.tick()
    assert report.scored == TARGETS - stored
    assert report.reemitted == stored
    assert judge.usage.calls == TARGETS - stored  # no target judged again once stored
    emitter = heir.emitter
    assert isinstance(emitter, ScoreEmitter) and emitter.force_flush(10)
    # the heir sent each output its new results and what that output still owed, nothing more
    assert emitter.exported == TARGETS - stored + owed["span"]
    assert emitter.exported_events == TARGETS - stored + owed["event"]

    results = store.results()
    keys = Counter((r.rule, r.target_id) for r in results)
    assert len(keys) == TARGETS and set(keys.values()) == {1}, keys
    assert all(r.status == "scored" for r in results)
    assert store.unemitted_results(outputs=["span"]) == []
    by_id = Counter(s.span_id for s in sink.spans)
    duplicates = sum(by_id.values()) - len(by_id)
    assert set(by_id) == {r.evaluation_span_id for r in results}, (
        f"{point}: {len(by_id)} distinct evaluation span ids for {TARGETS} targets "
        f"({duplicates} re-sent with the same id)"
    )
    resent = {o: n if marked != o else 0 for o, n in (("span", sent), ("event", events_sent))}
    assert duplicates == resent["span"], f"{point}: {duplicates} evaluation spans re-sent"
    assert store.unemitted_results(outputs=["event"]) == []

    # events: one per result, plus one re-sent for each the victim sent and did not mark
    per_result = Counter(
        (log.trace_id, log.span_id, log.attributes[attrs.SPANJUDGE_EVAL_RULE]) for log in sink.logs
    )
    expected = 1 + resent["event"] // TARGETS  # the victim sent all or none of them
    assert per_result == Counter({(r.trace_id, r.span_id, r.rule): expected for r in results}), (
        f"{point}: events per result {sorted(per_result.values())}"
    )
    assert all(
        log.event_name == attrs.GEN_AI_EVALUATION_RESULT_EVENT
        and log.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0
        for log in sink.logs
    )

    again = heir.tick()
    assert again.claimed == 0 and again.reemitted == 0
    heir.close()
    app.exporter.shutdown()
    store.close()
