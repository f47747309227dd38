"""A real Prometheus scrapes spanjudge metrics and runs every PromQL expression deploy/ ships.

Each dashboard and alert expression must evaluate without error, return data, and refer only
to series the target actually exposes. The alert rules are also loaded into the server and
must evaluate healthy. Today the target is a loopback endpoint fed by the real Telemetry class;
the integrator points ``metrics_url`` at a running ``spanjudge worker`` with demo traffic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deploy.conftest import MetricsTarget
from tests.deploy.prometheus_server import PrometheusServer
from tests.deploy.promql import (
    RULE_FILES,
    Expression,
    as_signal,
    dashboard_expressions,
    metric_names_in,
    rule_expressions,
    substitute,
)


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, telemetry_target: MetricsTarget
) -> Iterator[PrometheusServer]:
    """Prometheus with the shipped rules, after a few scrapes of a busy target (one server
    for the module: starting Prometheus is the slow part)."""
    workdir = tmp_path_factory.mktemp("prometheus")
    with PrometheusServer.start(workdir, telemetry_target.url, RULE_FILES) as prom:
        # counters must move between scrapes for rate()/increase()/deriv() to see a change
        for _ in range(3):
            telemetry_target.record_batch()
            prom.wait_for_scrapes(1)
        prom.wait_for_scrapes(1)
        yield prom


def check_expression(prom: PrometheusServer, expression: Expression, names: set[str]) -> str:
    """'' when ``expression`` runs and returns data over existing series, else why not."""
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
    return ""


def test_every_dashboard_and_alert_expression_returns_data(prometheus: PrometheusServer) -> None:
    names = prometheus.series_names()
    expressions = dashboard_expressions() + rule_expressions()
    assert len(expressions) >= 20  # the dashboard and rules were actually found
    problems = [p for e in expressions if (p := check_expression(prometheus, e, names))]
    assert problems == []


def test_alert_rules_load_and_evaluate_healthy(prometheus: PrometheusServer) -> None:
    rules = prometheus.wait_for_rule_evaluation()
    loaded = {r["name"] for r in rules}
    assert loaded == {e.source.split(": ", 1)[1] for e in rule_expressions()}
    assert [(r["name"], r["lastError"]) for r in rules if r["health"] != "ok"] == []


def test_backlog_alert_goes_pending_on_a_growing_backlog(prometheus: PrometheusServer) -> None:
    # the target's oldest item is >600 s old and pending grows every batch: the alert's
    # condition is true, so Prometheus holds it as pending (its `for:` is 15 minutes)
    prometheus.wait_for_rule_evaluation()
    alerts = prometheus.api("alerts")["alerts"]
    assert {a["labels"]["alertname"]: a["state"] for a in alerts}.get(
        "SpanjudgeBacklogGrowing"
    ) == "pending"


def test_a_misspelled_series_is_reported(prometheus: PrometheusServer) -> None:
    # the checker itself must be able to fail
    bad = Expression("probe", "sum(rate(spanjudge_evaluation_total[1m]))")
    assert "unknown series" in check_expression(prometheus, bad, prometheus.series_names())
    empty = Expression("probe", 'sum(spanjudge_evaluations_total{label="nope"})')
    assert "no data" in check_expression(prometheus, empty, prometheus.series_names())
