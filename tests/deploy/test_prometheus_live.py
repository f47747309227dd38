"""A real Prometheus scrapes a running ``spanjudge worker`` that evaluates the demo traffic,
and runs every PromQL expression deploy/ ships against it.

The worker is the real process (``spanjudge worker --config ...``: OTLP/HTTP receiver, SQLite
store, scheduler, scores out over OTLP to a loopback sink), judged by the offline scripted judge
(deterministic text rules, not an LLM) through litellm with a model litellm prices, so tokens
and cost are counted. The demo app sends its traffic twice over OTLP to the worker's receiver
(each round's conversation under its own id); its planted faults give passes and fails for
faithfulness, bias and topic adherence. What the dashboards also need happens for real too:

* judge errors: one more faithfulness rule is judged by a scripted server that answers every
  call with HTTP 400 (tests/deploy/worker_rules.py);
* sampler skips: a rule with ``sample_rate = 0.5`` and one whose filter matches no demo
  conversation;
* a refused request: a body that is not OTLP protobuf (400) beside the accepted ones;
* an old backlog, deliberately: before the worker starts, its store gets an open job created
  15 minutes ago for a rule no running worker has. ``Monitor._run_job`` releases a job whose rule
  it does not know back to pending ("for a process that has it"), so the job stays open and the
  oldest-waiting age is real, not faked. Later, more such jobs arrive, so pending grows.

Each dashboard and alert expression must evaluate without error, return data, and refer only
to series the worker's own ``/metrics`` exposes; the alert rules are loaded into the server and
must evaluate healthy. Comparisons become ``bool`` (see ``promql.as_signal``) so a condition
that is false today still shows that its inputs exist.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.deploy.conftest import (
    OLD_JOB_AGE,
    WAIT,
    LiveWorker,
    Samples,
    scrape,
    send_demo_traffic,
    total,
)
from tests.deploy.prometheus_server import PrometheusServer
from tests.deploy.promql import (
    RULE_FILES,
    Expression,
    as_signal,
    dashboard_expressions,
    dashboard_variables,
    metric_names_in,
    rule_expressions,
    substitute,
)
from tests.deploy.worker_rules import FAILING_RULE

FOREIGN_STEPS = (15, 15, 15)  # foreign jobs added per step while Prometheus scrapes
AGREEMENT_RULE = "bias"  # the rule whose verdicts the test's people contradict


@dataclass
class Live:
    prom: PrometheusServer
    worker: LiveWorker
    exposition: Samples  # the worker's /metrics after the traffic

    @property
    def names(self) -> set[str]:
        return {name for name, _ in self.exposition}


def send_round(worker: LiveWorker, conversation_id: str, version: str) -> None:
    send_demo_traffic(worker.process.url, conversation_id, version)
    refused = httpx.post(
        worker.process.url + "/v1/traces",
        content=b"this is not an OTLP protobuf body",
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert refused.status_code == 400, refused.text


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, live_worker: LiveWorker) -> Iterator[Live]:
    """Prometheus with the shipped rules, scraping the worker every second through two rounds
    of demo traffic (one server for the module: starting processes is the slow part)."""
    workdir = tmp_path_factory.mktemp("prometheus")
    with PrometheusServer.start(workdir, live_worker.metrics_url, RULE_FILES) as prom:
        prom.wait_for_scrapes(1)
        # Round one creates the labelled series; counters must then move between scrapes
        # for rate()/increase() to see a change, hence round two.
        send_round(live_worker, "demo-conversation-1", "1.0.0")
        first = live_worker.wait_idle(min_evaluations=1)
        prom.wait_for_scrapes(2)
        send_round(live_worker, "demo-conversation-2", "1.1.0")  # a new conversation and version
        live_worker.wait_idle(min_evaluations=total(first, "spanjudge_evaluations_total") + 1)
        # people disagree with every bias verdict: the agreement gauges and alert get data
        labelled = live_worker.label_against_the_judge(AGREEMENT_RULE)
        assert labelled >= 3
        prom.wait_for_scrapes(2)
        for count in FOREIGN_STEPS:  # work for another worker piles up
            live_worker.add_foreign_jobs(count)
            prom.wait_for_scrapes(1)
        yield Live(prom, live_worker, scrape(live_worker.metrics_url))


def check_expression(prom: PrometheusServer, expression: Expression, names: set[str]) -> str:
    """'' when ``expression`` runs and returns a number over existing series, else why not."""
    missing = metric_names_in(expression.expr) - names
    if missing:
        return f"{expression.source}: unknown series {sorted(missing)}"
    expr = as_signal(substitute(expression.expr))
    try:
        result = prom.query(expr)
    except AssertionError as exc:
        return f"{expression.source}: query failed: {exc}"
    if not result:
        return f"{expression.source}: no data for {expr}"
    if all(math.isnan(float(sample["value"][1])) for sample in result):
        return f"{expression.source}: only NaN for {expr}"
    return ""


def test_every_dashboard_and_alert_expression_returns_data(live: Live) -> None:
    expressions = dashboard_expressions() + rule_expressions()
    assert len(expressions) >= 20  # the dashboard and rules were actually found
    problems = [p for e in expressions if (p := check_expression(live.prom, e, live.names))]
    assert problems == []


def test_dashboard_variables_offer_the_worker_label_values(live: Live) -> None:
    variables = dashboard_variables()
    assert {v.name for v in variables} >= {"metric", "service"}
    offered = {
        v.name: set(live.prom.api(f"label/{v.label}/values", **{"match[]": v.series}))
        for v in variables
    }
    assert offered["metric"] == {"faithfulness", "bias", "topic_adherence"}
    assert offered["service"] == {"support-bot"}


def test_the_traffic_produced_every_outcome_the_panels_show(live: Live) -> None:
    # what the expressions return comes from real events, not only from primed zero series
    def value(expr: str, *by: str) -> dict[tuple[str, ...], float]:
        result = live.prom.query(expr)
        return {tuple(s["metric"][k] for k in by): float(s["value"][1]) for s in result}

    outcomes = value("sum by (metric, label) (spanjudge_evaluations_total)", "metric", "label")
    for metric, label in [
        ("faithfulness", "pass"), ("faithfulness", "fail"), ("faithfulness", "error"),
        ("bias", "pass"), ("bias", "fail"), ("topic_adherence", "fail"),
    ]:  # fmt: skip
        assert outcomes.get((metric, label), 0) > 0, (metric, label, outcomes)
    mean = next(e for e in dashboard_expressions() if e.source.endswith(": Mean score by metric"))
    means = value(substitute(mean.expr), "metric")  # the conversation rule scored twice too
    assert set(means) == {("faithfulness",), ("bias",), ("topic_adherence",)}, means
    assert not any(math.isnan(v) for v in means.values()), means
    errors = value('sum by (rule) (spanjudge_evaluations_total{label="error"})', "rule")
    assert set(errors) == {(FAILING_RULE,)}
    skipped = value("sum by (reason) (spanjudge_sampler_skipped_total)", "reason")
    assert skipped[("filtered",)] > 0 and skipped[("not_sampled",)] > 0
    codes = value("sum by (code) (spanjudge_receiver_requests_total)", "code")
    assert codes[("200",)] > 0 and codes[("400",)] == 2
    spend = value("sum by (direction) (spanjudge_judge_tokens_total)", "direction")
    assert spend[("input",)] > 0 and spend[("output",)] > 0
    assert value("sum(spanjudge_judge_cost_usd_total)")[()] > 0
    assert value("sum(spanjudge_exporter_written_spans_total)")[()] > 0
    assert value("max(spanjudge_backlog_oldest_age_seconds)")[()] > OLD_JOB_AGE - 1
    # the scores went out (the emitter's drop counters read 0 because nothing was dropped)
    assert any(s.name.startswith("evaluation ") for s in live.worker.sink.spans)


def test_alert_rules_load_and_evaluate_healthy(live: Live) -> None:
    rules = live.prom.wait_for_rule_evaluation()
    loaded = {r["name"] for r in rules}
    assert loaded == {e.source.split(": ", 1)[1] for e in rule_expressions()}
    assert [(r["name"], r["lastError"]) for r in rules if r["health"] != "ok"] == []


def test_alerts_go_pending_on_the_workers_judge_errors_and_growing_backlog(live: Live) -> None:
    # Half of the faithfulness evaluations end in an error (the failing judge's rule), the
    # oldest open job is 15 minutes old and pending jobs grew: both conditions are true, so
    # Prometheus holds these alerts as pending (their `for:` is 10 and 15 minutes). Nothing
    # was dropped, so the drop alert stays quiet.
    expected = {"SpanjudgeJudgeErrorRateHigh", "SpanjudgeBacklogGrowing"}
    deadline = time.monotonic() + WAIT
    while True:
        alerts = live.prom.api("alerts")["alerts"]
        states = {a["labels"]["alertname"]: a["state"] for a in alerts}
        pending = {name for name, state in states.items() if state == "pending"}
        if expected <= pending or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert expected <= pending, states
    assert "SpanjudgeSpansDropped" not in states


def test_agreement_gauges_and_alert_follow_the_labels_people_posted(live: Live) -> None:
    # every label contradicts the judge: accuracy 0, kappa <= 0, under the 0.4 floor with
    # at least the configured 3 labels, so the agreement alert goes pending for that rule only
    def stat(name: str) -> dict[str, float]:
        result = live.prom.query(f'spanjudge_judge_agreement{{stat="{name}"}}')
        return {s["metric"]["rule"]: float(s["value"][1]) for s in result}

    assert set(stat("labels")) == {AGREEMENT_RULE}
    assert stat("labels")[AGREEMENT_RULE] >= 3
    assert stat("accuracy") == {AGREEMENT_RULE: 0.0}
    assert stat("kappa")[AGREEMENT_RULE] <= 0.0
    assert stat("floor") == {AGREEMENT_RULE: 0.4}
    assert stat("min_labels") == {AGREEMENT_RULE: 3.0}
    deadline = time.monotonic() + WAIT
    while True:
        alerts = live.prom.api("alerts")["alerts"]
        low = [
            a["labels"] for a in alerts if a["labels"]["alertname"] == "SpanjudgeJudgeAgreementLow"
        ]
        if low or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(a["rule"], a["metric"]) for a in low] == [(AGREEMENT_RULE, "bias")]


def test_a_misspelled_series_is_reported(live: Live) -> None:
    # the checker itself must be able to fail
    bad = Expression("probe", "sum(rate(spanjudge_evaluation_total[1m]))")
    assert "unknown series" in check_expression(live.prom, bad, live.names)
    empty = Expression("probe", 'sum by (metric) (spanjudge_evaluations_total{label="nope"})')
    assert "no data" in check_expression(live.prom, empty, live.names)
    nan = Expression("probe", "sum(spanjudge_evaluations_total) * NaN")
    assert "only NaN" in check_expression(live.prom, nan, live.names)
