"""A field the plausibility gate refuses, through the online loop: the result is skipped with
``error_type = "implausible_field"`` and the reason naming the field and the check, no judge
call is made, and ``spanjudge.sampler.skipped`` counts it under ``implausible_field`` (issue 37).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from spanjudge._core.telemetry import Telemetry
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import observe
from tests.support.metrics import data_points


@observe(kind="agent", name="orchard")
def orchard_turn(question: str) -> dict[str, Any]:
    # a result object whose only text beside its status is nothing a judge can read
    return {"status": "completed", "steps": 3}


@observe(kind="agent", name="orchard")
def orchard_status(question: str) -> str:
    return "end_turn"


def test_a_refused_field_is_skipped_counted_and_never_judged(
    app: Any, store: Any, offline_judge: ScriptedJudgeServer, clock: Any
) -> None:
    orchard_status("Is the orchard shop open on Sundays?")
    orchard_turn("And on holidays?")
    app.flush()
    clock.advance(11)
    reader = InMemoryMetricReader()
    monitor = Monitor(
        [Rule(BiasMetric(model=offline_judge.judge()), target="agent")],
        store=store,
        telemetry=Telemetry(MeterProvider(metric_readers=[reader])),
        clock=clock,
        config=MonitorConfig(settle_seconds=10, retention_seconds=None),
    )
    monitor.tick()
    results = store.results()
    assert len(results) == 2 and offline_judge.requests == []
    assert {r.error_type for r in results} == {"implausible_field"}
    assert all(r.status == "skipped" for r in results)
    reasons = sorted(r.skip_reason or "" for r in results)
    assert reasons[0].startswith("implausible actual_output: a JSON dump of an object")
    assert reasons[1].startswith("implausible actual_output: a single word that is a status")
    counted = [
        (p.attributes["reason"], p.value)
        for name, p in data_points(reader)
        if name == "spanjudge.sampler.skipped"
    ]
    assert counted == [("implausible_field", 2)]
