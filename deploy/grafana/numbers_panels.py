"""The dashboard's "Pass rate with its interval" row: a band and the regression check.

The band: the worker's ``spanjudge_segment_pass_rate`` gauge for one rule and segment (the
``band_rule``, ``band_key`` and ``band_segment`` variables), its ``low`` and ``high`` bounds
filled between, the estimate as a line. The regression panel: each candidate segment's effect
against its baseline (``regression_baseline``); the alert SpanjudgeRegression fires on the
decision. ``generate.py`` calls :func:`numbers` and :func:`variables`.
"""

from __future__ import annotations

import dashboard_queries as q
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus
from grafana_foundation_sdk.builders import timeseries as ts
from grafana_foundation_sdk.models import dashboard as dm

PROM = dm.DataSourceRef(type_val="prometheus", uid=q.PROM_UID)
LOW, HIGH, ESTIMATE = "low (95%)", "high (95%)", "pass rate"


def _query(expr: str, legend: str, ref: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().ref_id(ref).datasource(PROM).expr(expr).legend_format(legend)


def _properties(**values: object) -> list[dm.DynamicConfigValue]:
    return [dm.DynamicConfigValue(id_val=key, value=value) for key, value in values.items()]


def numbers(board: db.Dashboard) -> None:
    board.with_row(db.Row("Pass rate with its interval"))
    about = (
        "Pass rate of one rule in one segment (the band_* variables) over the worker's "
        "interval window, with its 95% interval as a band (Wilson, weighted by sampling "
        "probability; docs/numbers.md). A band that does not narrow needs more evaluations."
    )
    band = (
        ts.Panel()
        .title("Pass rate with its 95% interval: $band_rule, $band_key = $band_segment")
        .description(about)
        .datasource(PROM)
        .span(16)
        .height(8)
        .targets(
            [
                _query(q.pass_rate_bound("low"), LOW, "A"),
                _query(q.pass_rate_bound("high"), HIGH, "B"),
                _query(q.pass_rate_bound("estimate"), ESTIMATE, "C"),
            ]
        )
        .legend(cb.VizLegendOptions().show_legend(True))
        .unit("percentunit")
        .min(0)
        .max(1)
    )
    # the band: the high bound's line filled down to the low bound's, neither drawn as a line
    band = band.override_by_name(
        HIGH, _properties(**{"custom.fillBelowTo": LOW, "custom.lineWidth": 0})
    )
    band = band.override_by_name(LOW, _properties(**{"custom.lineWidth": 0}))
    board.with_panel(band)
    about = (
        "Candidate segment minus baseline (regression_baseline), per rule and measure. The "
        "SpanjudgeRegression alert fires when the anytime-valid decision says worse; "
        "`spanjudge compare` prints the intervals."
    )
    effect = _query(
        q.regression("effect"), q.legend("rule", "measure", "candidate", prefix="") + " vs "
        "{{baseline}}", "A",
    )  # fmt: skip
    board.with_panel(
        ts.Panel()
        .title("Regression check: effect against the baseline segment")
        .description(about)
        .datasource(PROM)
        .span(8)
        .height(8)
        .targets([effect])
        .legend(cb.VizLegendOptions().show_legend(True))
        .unit("percentunit")
    )


def variables(board: db.Dashboard) -> None:
    for name, label in q.BAND_VARIABLES:
        query: dict[str, object] = {
            "query": q.label_values(label, q.SEGMENT_PASS_RATE),
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        }
        board.with_variable(
            db.QueryVariable(name)
            .label(name.replace("_", " "))
            .datasource(PROM)
            .query(query)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
        )
