"""Generate the spanjudge Grafana dashboard (``dashboards/spanjudge.json``) from code.

The dashboard is built with the builders of ``grafana-foundation-sdk`` (Grafana's own
dashboard, panel and query types, generated from Grafana's schemas), so a field Grafana does
not know cannot be written. The queries come from ``dashboard_queries.py`` beside this file,
which takes every series and label name from :mod:`spanjudge._core.metric_names` and every
attribute from :mod:`spanjudge.tracer._attributes`: a rename there shows up here on the next
run (and ``tests/deploy`` fails until the checked-in JSON is regenerated)::

    .venv/bin/python deploy/grafana/generate.py          # rewrite the JSON
    .venv/bin/python deploy/grafana/generate.py --check  # exit 1 if the JSON is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# the sibling module: run as a script, this file's folder is first on sys.path
import dashboard_queries as q
import numbers_panels
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, logs, loki, prometheus, stat, table, tempo
from grafana_foundation_sdk.builders import text as textpanel
from grafana_foundation_sdk.builders import timeseries as ts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.common import BigValueColorMode, LogsSortOrder
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.text import TextMode

from spanjudge._core import metric_names as mn

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "spanjudge.json"
PROM = dm.DataSourceRef(type_val="prometheus", uid=q.PROM_UID)
TEMPO = dm.DataSourceRef(type_val="tempo", uid=q.TEMPO_UID)
LOKI = dm.DataSourceRef(type_val="loki", uid=q.LOKI_UID)
# Grafana 11's dashboard schema; the SDK's model says 36, and Grafana would run its 37..39
# migrations on every load
SCHEMA_VERSION = 39
Links = tuple[db.DashboardLink, ...]


def link(title: str, url: str, *, new_tab: bool = False) -> db.DashboardLink:
    return db.DashboardLink(title).type(dm.DashboardLinkType.LINK).url(url).target_blank(new_tab)


LOW_LINK = link(
    f"Low-scoring {q.FIELD_METRIC} evaluations in Tempo",
    q.tempo_explore_url(q.low_score_traceql(q.FIELD_METRIC)),
)
JAEGER_FAIL = link("Failed evaluations in Jaeger", q.JAEGER_FAILED, new_tab=True)
BY_METRIC = q.legend(mn.L_METRIC)


# --- panel shapes --------------------------------------------------------------------------


def prom(expr: str, legend: str, ref: str = "A", *, instant: bool = False) -> prometheus.Dataquery:
    query = prometheus.Dataquery().ref_id(ref).datasource(PROM).expr(expr).legend_format(legend)
    return query.instant() if instant else query.range()


def series(
    title: str,
    *targets: prometheus.Dataquery,
    w: int = 8,
    unit: str = "short",
    ratio: bool = False,
    links: Links = (),
    about: str = "",
) -> ts.Panel:
    """A time series panel on Prometheus; ``ratio`` pins the axis to 0..1 as a percentage."""
    panel = ts.Panel().title(title).description(about).datasource(PROM).span(w).height(8)
    panel = panel.targets(list(targets)).data_links(list(links))
    panel = panel.legend(cb.VizLegendOptions().show_legend(True))
    return panel.unit("percentunit").min(0).max(1) if ratio else panel.unit(unit)


def single(
    title: str,
    *targets: prometheus.Dataquery,
    w: int,
    unit: str,
    links: Links = (),
    about: str = "",
) -> stat.Panel:
    """A stat panel showing each target's last value."""
    panel = stat.Panel().title(title).description(about).datasource(PROM).span(w).height(8)
    panel = panel.targets(list(targets)).data_links(list(links)).unit(unit)
    return panel.reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))


def traces_table(title: str, traceql: str, about: str = "") -> table.Panel:
    """The 20 latest traces matching ``traceql``, from Tempo."""
    target = tempo.TempoQuery().ref_id("A").datasource(TEMPO).query_type("traceql")
    panel = table.Panel().title(title).description(about).datasource(TEMPO).span(12).height(10)
    return panel.with_target(target.limit(20).query(traceql)).show_header(True)


# --- rows ----------------------------------------------------------------------------------


def scores(board: db.Dashboard) -> None:
    board.with_row(db.Row("Scores"))
    about = "Average judge score per metric. Click a series for its low-scoring traces in Tempo."
    board.with_panel(
        series(
            "Mean score by metric",
            prom(q.SCORE_MEAN, BY_METRIC),
            w=12,
            ratio=True,
            links=(LOW_LINK, JAEGER_FAIL),
            about=about,
        )
    )
    p50, p10 = (q.quantile(x, q.SCORE, q.SEL, mn.L_METRIC) for x in (0.5, 0.1))
    board.with_panel(
        series(
            "Score percentiles (p10, p50) by metric",
            prom(p50, q.legend(mn.L_METRIC, prefix="p50 ")),
            prom(p10, q.legend(mn.L_METRIC, prefix="p10 "), "B"),
            w=12,
            ratio=True,
            links=(LOW_LINK,),
            about="Bucketed by tenths (0.1 ... 1.0), so percentiles are interpolated.",
        )
    )
    buckets = prom(q.SCORE_BUCKETS, q.legend(q.LE)).format(PromQueryFormat.HEATMAP)
    # a full-width slot: Grafana splits it between the repeated copies (one per metric)
    board.with_panel(
        heatmap.Panel()
        .title("Score distribution: $metric")
        .description(
            "How many evaluations fell into each score bucket over time, one panel per metric."
        )
        .datasource(PROM)
        .span(24)
        .height(8)
        .with_target(buckets)
        .repeat("metric")
        .repeat_direction("h")
        .unit("short")
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("short"))
        .cell_values(heatmap.CellValues().unit("short"))
    )
    rate_in_range = prom(q.pass_rate(q.RANGE), BY_METRIC, instant=True)
    about = "Passed / (passed + failed) per metric; errors and skips excluded."
    pass_rate = single(
        "Pass rate (time range)",
        rate_in_range,
        w=8,
        unit="percentunit",
        links=(JAEGER_FAIL,),
        about=about,
    )
    board.with_panel(pass_rate.min(0).max(1).color_mode(BigValueColorMode.BACKGROUND))
    board.with_panel(
        series(
            "Pass rate by metric",
            prom(q.pass_rate(q.RI), BY_METRIC),
            w=16,
            ratio=True,
            links=(LOW_LINK,),
        )
    )


def evaluations(board: db.Dashboard) -> None:
    board.with_row(db.Row("Evaluations"))
    board.with_panel(
        series(
            "Evaluations per minute by outcome",
            prom(q.OUTCOMES_PER_MIN, q.legend(mn.L_LABEL)),
            about="pass, fail, error (no score) and skipped.",
        )
    )
    errored = link("Errored evaluations in Tempo", q.tempo_explore_url(q.errored_traceql()))
    board.with_panel(
        series(
            "Judge errors per minute by metric",
            prom(q.ERRORS_PER_MIN, BY_METRIC),
            links=(errored,),
            about="Evaluations that ended without a score; their spans carry error.type.",
        )
    )
    board.with_panel(
        series(
            "Targets not evaluated per minute by reason",
            prom(q.SKIPPED_PER_MIN, q.legend(mn.L_REASON)),
            about="not_sampled is expected (sample rate); budgets and missing fields are "
            "worth a look.",
        )
    )


def agreement(board: db.Dashboard) -> None:
    board.with_row(db.Row("Judge vs people"))
    kappa = prom(q.agreement("kappa", mn.L_RULE, mn.L_METRIC), q.legend(mn.L_RULE))
    about = "Cohen's kappa of the judge's verdicts against people's labels (spanjudge feedback), "
    about += "per rule, and the configured floor; `spanjudge calibration` shows the whole table."
    floor = prom(q.agreement("floor"), "floor", "B")
    board.with_panel(
        series("Judge-human agreement (Cohen's kappa)", kappa, floor, w=16, about=about)
    )
    labels = prom(q.agreement("labels", mn.L_RULE, mn.L_METRIC), q.legend(mn.L_RULE), instant=True)
    about = "Labelled results in the agreement window; the alert waits for agreement_min_labels."
    board.with_panel(single("People's labels per rule", labels, w=8, unit="short", about=about))


def spend_and_backlog(board: db.Dashboard) -> None:
    board.with_row(db.Row("Judge spend"))
    tokens = prom(q.TOKENS_PER_MIN, q.legend(mn.L_MODEL, mn.L_DIRECTION))
    board.with_panel(series("Judge tokens per minute", tokens))
    cost = prom(q.COST_PER_HOUR, BY_METRIC)
    board.with_panel(series("Judge cost per hour by metric", cost, unit="currencyUSD"))
    board.with_panel(
        single(
            "Judge cost (time range)",
            prom(q.COST_IN_RANGE, "cost", instant=True),
            prom(q.CALLS_IN_RANGE, "judge calls", "B", instant=True),
            w=8,
            unit="currencyUSD",
        )
    )

    board.with_row(db.Row("Backlog and lag"))
    board.with_panel(
        series(
            "Backlog by state",
            prom(q.BACKLOG_BY_STATE, q.legend(mn.L_STATE)),
            about="pending/leased jobs and traces/conversations not yet planned.",
        )
    )
    oldest = prom(q.OLDEST_WAITING, "age", instant=True)
    board.with_panel(single("Oldest waiting target", oldest, w=4, unit="s"))
    p50, p99 = (q.quantile(x, q.LAG, q.METRIC_SEL) for x in (0.5, 0.99))
    board.with_panel(
        series(
            "Lag from target end to score (p50, p99)",
            prom(p50, "p50"),
            prom(p99, "p99", "B"),
            w=12,
            unit="s",
            about="Includes settle time (trace) or idle time (conversation) by design.",
        )
    )


def ingest(board: db.Dashboard) -> None:
    board.with_row(db.Row("Ingest"))
    board.with_panel(
        series(
            "Receiver requests per second by status",
            prom(q.REQUESTS_PER_S, q.legend(mn.L_CODE)),
            about="503 means the worker asked the Collector to back off (store behind).",
        )
    )
    board.with_panel(series("Spans received per second", prom(q.SPANS_PER_S, "spans/s")))
    board.with_panel(
        series(
            "Spans dropped per minute",
            prom(q.STORE_DROPS_PER_MIN, q.legend(mn.L_REASON, prefix="store ")),
            prom(q.SCORE_DROPS_PER_MIN, q.legend(mn.L_REASON, prefix="scores "), "B"),
            about="store: spans lost before the span store (their traces cannot be "
            "evaluated); scores: evaluation spans the emitter could not send.",
        )
    )


def traces(board: db.Dashboard) -> None:
    board.with_row(db.Row("Low scores -> traces"))
    about = (
        "Evaluation spans (child-span mode) scoring under the threshold. Click a trace id to "
        "open the evaluated trace."
    )
    board.with_panel(
        traces_table("Low scores ($metric under $low_score)", q.low_score_traceql(), about)
    )
    agent = traces_table("Failed evaluations of agent $agent", q.failed_by_agent_traceql())
    board.with_panel(agent)
    content = (
        "Jaeger tag search (service `${eval_service}`):\n\n"
        + "".join(f"- [{label}]({url})\n" for label, url in q.JAEGER_SEARCHES)
        + "\nJaeger matches tag values exactly; use Tempo (TraceQL) for score thresholds. "
        "See docs/seeing-scores.md."
    )
    board.with_panel(
        textpanel.Panel()
        .title("Search in Jaeger")
        .span(24)
        .height(5)
        .mode(TextMode.MARKDOWN)
        .content(content)
    )


def events(board: db.Dashboard) -> None:
    board.with_row(db.Row("Failing evaluations (events in Loki)"))
    target = loki.Dataquery().ref_id("A").datasource(LOKI).expr(q.failed_events_logql())
    about = (
        f"The latest {q.RESULT_EVENT} events labelled fail, with the judge's "
        "explanation. Open an event for its attributes; its trace_id links to the evaluated "
        "trace in Tempo."
    )
    board.with_panel(
        logs.Panel()
        .title("Latest failing evaluations ($metric)")
        .description(about)
        .datasource(LOKI)
        .span(24)
        .height(10)
        .with_target(target.max_lines(50))
        .show_time(True)
        .wrap_log_message(True)
        .enable_log_details(True)
        .sort_order(LogsSortOrder.DESCENDING)
    )


# --- dashboard -----------------------------------------------------------------------------


def variables(board: db.Dashboard) -> None:
    for label in (mn.L_METRIC, mn.L_SERVICE):
        query: dict[str, object] = {
            "query": q.label_values(label),
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        }
        board.with_variable(
            db.QueryVariable(label)
            .label(label)
            .datasource(PROM)
            .query(query)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(dm.VariableOption(text="All", value="$__all"))
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
        )
    for name, label, value in (
        ("low_score", "low score below", "0.5"),
        ("agent", "agent (regex)", ".*"),
        ("jaeger_url", "Jaeger URL", "http://localhost:16686"),
        ("eval_service", "service of evaluation spans", "spanjudge-worker"),
    ):
        current = dm.VariableOption(text=value, value=value)
        board.with_variable(
            db.TextBoxVariable(name).label(label).default_value(value).current(current)
        )


def build() -> dm.Dashboard:
    """The whole dashboard as Grafana's typed model."""
    board = (
        db.Dashboard("spanjudge")
        .uid("spanjudge-overview")
        .description("LLM-as-a-judge scores from spanjudge: quality, volume, spend, backlog.")
        .tags(["spanjudge", "llm", "evaluation"])
        .timezone("browser")
        .readonly()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .version(1)
        .refresh("30s")
        .time("now-6h", "now")
        # Grafana puts its built-in "Annotations & Alerts" query into an empty list itself
        .annotations([])
        .link(link("Tempo: low scores", q.tempo_explore_url(q.low_score_traceql())))
        .link(link("Jaeger: failed evaluations", q.JAEGER_FAILED, new_tab=True))
    )
    variables(board)
    numbers_panels.variables(board)
    rows = (scores, numbers_panels.numbers, evaluations, agreement, spend_and_backlog, ingest)
    for row in (*rows, traces, events):
        row(board)
    model = board.build()
    model.schema_version = SCHEMA_VERSION
    # the builders leave ids unset; Grafana wants one per panel, rows included
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number
    return model


def render() -> str:
    return json.dumps(build(), cls=JSONEncoder, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the JSON is stale")
    args = parser.parse_args(argv)
    rendered = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != rendered:
            print(f"{OUTPUT} is stale: run deploy/grafana/generate.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(rendered, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
