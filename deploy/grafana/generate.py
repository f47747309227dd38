"""Generate the spanjudge Grafana dashboard (``dashboards/spanjudge.json``) from code.

Metric names come from :mod:`spanjudge.exporters.metric_names` and span attribute names from
:mod:`spanjudge.tracer.attributes`, so a rename there shows up here on the next run (and
``tests/deploy`` fails until the checked-in JSON is regenerated)::

    .venv/bin/python deploy/grafana/generate.py          # rewrite the JSON
    .venv/bin/python deploy/grafana/generate.py --check  # exit 1 if the JSON is stale

No dashboard SDK: the Grafana JSON model is plain data, and a few small builders keep it
readable without another dependency.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from spanjudge.exporters import metric_names as mn
from spanjudge.tracer import attributes as attr

Json = dict[str, Any]

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "spanjudge.json"
PROM: Json = {"type": "prometheus", "uid": "prometheus"}
TEMPO: Json = {"type": "tempo", "uid": "tempo"}
EVAL_SPAN_PREFIX = "evaluation "  # evaluation span name: "evaluation {metric}"


def scraped(name: str, kind: str = "gauge") -> str:
    """The Prometheus name of an OTel instrument: dots -> underscores, counters get _total."""
    base = name.replace(".", "_")
    return base + "_total" if kind == "counter" else base


EVALS = scraped(mn.EVALUATIONS, "counter")
SCORE = scraped(mn.EVALUATION_SCORE)  # histogram: _bucket, _sum, _count
LAG = scraped(mn.EVALUATION_LAG)
TOKENS = scraped(mn.JUDGE_TOKENS, "counter")
COST = scraped(mn.JUDGE_COST, "counter")
CALLS = scraped(mn.JUDGE_CALLS, "counter")
BACKLOG = scraped(mn.BACKLOG)
BACKLOG_AGE = scraped(mn.BACKLOG_AGE)
SKIPPED = scraped(mn.SAMPLER_SKIPPED, "counter")
DROPPED = scraped(mn.EXPORTER_DROPPED, "counter")
EMIT_DROPPED = scraped(mn.EMITTER_DROPPED, "counter")
REQUESTS = scraped(mn.RECEIVER_REQUESTS, "counter")
SPANS_IN = scraped(mn.RECEIVER_SPANS, "counter")

SEL = f'{mn.L_METRIC}=~"$metric", {mn.L_SERVICE}=~"$service"'
RI = "$__rate_interval"


def low_score_traceql(metric: str = "$metric", threshold: str = "$low_score") -> str:
    """TraceQL: evaluation spans of ``metric`` scoring under ``threshold`` (child-span mode)."""
    return (
        f'{{ span.{attr.GEN_AI_EVALUATION_NAME} =~ "{metric}" && '
        f"span.{attr.GEN_AI_EVALUATION_SCORE_VALUE} < {threshold} }}"
    )


def failed_by_agent_traceql() -> str:
    """TraceQL: failed evaluations whose parent is an agent span named like ``$agent``."""
    return (
        f'{{ span.{attr.GEN_AI_AGENT_NAME} =~ "$agent" }} > '
        f'{{ span.{attr.GEN_AI_EVALUATION_SCORE_LABEL} = "fail" }}'
    )


def errored_traceql() -> str:
    """TraceQL: evaluations that produced no score (judge error, missing field)."""
    return (
        f'{{ span.{attr.GEN_AI_EVALUATION_NAME} =~ "$metric" && '
        f"span.{attr.ERROR_TYPE} != nil }}"
    )


def tempo_explore_url(query: str) -> str:
    """A Grafana Explore link running ``query`` in Tempo over the dashboard's time range."""
    pane = {
        "datasource": TEMPO["uid"],
        "queries": [{"refId": "A", "datasource": TEMPO, "queryType": "traceql", "query": query}],
        "range": {"from": "${__from}", "to": "${__to}"},
    }
    # keep ${...} unescaped: Grafana interpolates them before following the link
    return "/explore?schemaVersion=1&orgId=1&panes=" + quote(
        json.dumps({"scores": pane}, separators=(",", ":")), safe="${}"
    )


def jaeger_search_url(tags: dict[str, str]) -> str:
    """A Jaeger UI tag search in the evaluation spans' service over the last hour."""
    return (
        "${jaeger_url}/search?service=${eval_service}&lookback=1h&limit=50&tags="
        + quote(json.dumps(tags, separators=(",", ":")), safe="${}")
    )


class Layout:
    """Assigns panel ids and grid positions left to right, top to bottom (24 columns)."""

    def __init__(self) -> None:
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_h = 0

    def place(self, w: int, h: int) -> tuple[int, Json]:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_h = max(self.row_h, h)
        pid, self.next_id = self.next_id, self.next_id + 1
        return pid, pos

    def row(self, title: str) -> Json:
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pid, pos = self.place(24, 1)
        self.x, self.y, self.row_h = 0, self.y + 1, 0
        return {"type": "row", "id": pid, "title": title, "gridPos": pos, "collapsed": False,
                "panels": []}


def prom_target(expr: str, legend: str, ref: str = "A", **extra: Any) -> Json:
    return {"refId": ref, "datasource": PROM, "expr": expr, "legendFormat": legend,
            "range": True, **extra}


def panel(layout: Layout, kind: str, title: str, targets: list[Json], *, w: int = 12, h: int = 8,
          unit: str = "short", description: str = "", minmax: tuple[float, float] | None = None,
          links: list[Json] | None = None, options: Json | None = None,
          datasource: Json = PROM, **extra: Any) -> Json:
    pid, pos = layout.place(w, h)
    defaults: Json = {"unit": unit, "links": links or []}
    if minmax is not None:
        defaults["min"], defaults["max"] = minmax
    return {"type": kind, "id": pid, "title": title, "description": description,
            "gridPos": pos, "datasource": datasource, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": options or {}, **extra}


def pass_rate_expr(window: str) -> str:
    """Passed / decided per metric. A metric whose evaluations all failed has no ``pass``
    series; ``or 0 * ...`` supplies its zero so it shows 0% instead of vanishing."""
    dec = f'{EVALS}{{{SEL}, {mn.L_LABEL}=~"pass|fail"}}'
    passed = f'{EVALS}{{{SEL}, {mn.L_LABEL}="pass"}}'
    return (
        f"(sum by (metric) (increase({passed}[{window}])) "
        f"or sum by (metric) (0 * increase({dec}[{window}]))) "
        f"/ sum by (metric) (increase({dec}[{window}]))"
    )


def variables() -> list[Json]:
    def label_var(name: str, label: str) -> Json:
        q = f"label_values({EVALS}, {label})"
        return {"type": "query", "name": name, "label": label, "datasource": PROM,
                "query": {"query": q, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
                "definition": q, "refresh": 2, "multi": True, "includeAll": True,
                "allValue": ".*", "current": {"text": "All", "value": "$__all"}, "sort": 1}

    def text_var(name: str, label: str, value: str, hidden: bool = False) -> Json:
        return {"type": "textbox" if not hidden else "constant", "name": name, "label": label,
                "query": value, "current": {"text": value, "value": value},
                "hide": 2 if hidden else 0}

    return [
        label_var("metric", mn.L_METRIC),
        label_var("service", mn.L_SERVICE),
        text_var("low_score", "low score below", "0.5"),
        text_var("agent", "agent (regex)", ".*"),
        text_var("jaeger_url", "Jaeger URL", "http://localhost:16686"),
        text_var("eval_service", "service of evaluation spans", "spanjudge-worker"),
    ]


def build() -> Json:
    """The whole dashboard as Grafana JSON (schemaVersion 39)."""
    lo = Layout()
    p: list[Json] = []
    low_link = {"title": "Low-scoring ${__field.labels.metric} evaluations in Tempo",
                "url": tempo_explore_url(low_score_traceql("${__field.labels.metric}"))}
    jaeger_fail = {"title": "Failed evaluations in Jaeger",
                   "url": jaeger_search_url({attr.GEN_AI_EVALUATION_SCORE_LABEL: "fail"}),
                   "targetBlank": True}

    p.append(lo.row("Scores"))
    p.append(panel(
        lo, "timeseries", "Mean score by metric",
        [prom_target(f"sum by (metric) (rate({SCORE}_sum{{{SEL}}}[{RI}])) / "
                     f"sum by (metric) (rate({SCORE}_count{{{SEL}}}[{RI}]))", "{{metric}}")],
        minmax=(0, 1), unit="percentunit", links=[low_link, jaeger_fail],
        description="Average judge score per metric. Click a series for its low-scoring "
                    "traces in Tempo.",
    ))
    p.append(panel(
        lo, "timeseries", "Score percentiles (p10, p50) by metric",
        [prom_target(f"histogram_quantile(0.5, sum by (metric, le) "
                     f"(rate({SCORE}_bucket{{{SEL}}}[{RI}])))", "p50 {{metric}}"),
         prom_target(f"histogram_quantile(0.1, sum by (metric, le) "
                     f"(rate({SCORE}_bucket{{{SEL}}}[{RI}])))", "p10 {{metric}}", "B")],
        minmax=(0, 1), unit="percentunit", links=[low_link],
        description="Bucketed by tenths (0.1 ... 1.0), so percentiles are interpolated.",
    ))
    p.append(panel(
        lo, "heatmap", "Score distribution: $metric",
        [prom_target(f"sum by (le) (increase({SCORE}_bucket{{{mn.L_METRIC}=~\"$metric\", "
                     f"{mn.L_SERVICE}=~\"$service\"}}[{RI}]))", "{{le}}",
                     format="heatmap")],
        # a full-width slot: Grafana splits it between the repeated copies (one per metric)
        w=24, repeat="metric", repeatDirection="h", maxPerRow=3,
        options={"calculate": False, "yAxis": {"unit": "short"},
                 "cellValues": {"unit": "short"}},
        description="How many evaluations fell into each score bucket over time, one panel "
                    "per metric.",
    ))
    p.append(panel(
        lo, "stat", "Pass rate (time range)",
        [prom_target(pass_rate_expr("$__range"), "{{metric}}", instant=True, range=False)],
        w=8, unit="percentunit", minmax=(0, 1), links=[jaeger_fail],
        options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background"},
        description="Passed / (passed + failed) per metric; errors and skips excluded.",
    ))
    p.append(panel(
        lo, "timeseries", "Pass rate by metric", [prom_target(pass_rate_expr(RI), "{{metric}}")],
        w=16, unit="percentunit", minmax=(0, 1), links=[low_link],
    ))

    p.append(lo.row("Evaluations"))
    p.append(panel(
        lo, "timeseries", "Evaluations per minute by outcome",
        [prom_target(f"sum by (label) (rate({EVALS}{{{SEL}}}[{RI}])) * 60", "{{label}}")],
        w=8, unit="short", description="pass, fail, error (no score) and skipped.",
    ))
    p.append(panel(
        lo, "timeseries", "Judge errors per minute by metric",
        [prom_target(f'sum by (metric) (rate({EVALS}{{{SEL}, {mn.L_LABEL}="error"}}[{RI}])) '
                     f"* 60", "{{metric}}")],
        w=8, links=[{"title": "Errored evaluations in Tempo",
                     "url": tempo_explore_url(errored_traceql())}],
        description="Evaluations that ended without a score; their spans carry error.type.",
    ))
    p.append(panel(
        lo, "timeseries", "Targets not evaluated per minute by reason",
        [prom_target(f"sum by (reason) (rate({SKIPPED}[{RI}])) * 60", "{{reason}}")],
        w=8, description="not_sampled is expected (sample rate); budgets and missing fields "
                         "are worth a look.",
    ))

    p.append(lo.row("Judge spend"))
    p.append(panel(
        lo, "timeseries", "Judge tokens per minute",
        [prom_target(f"sum by (model, direction) (rate({TOKENS}{{{mn.L_METRIC}=~\"$metric\"}}"
                     f"[{RI}])) * 60", "{{model}} {{direction}}")],
        w=8,
    ))
    p.append(panel(
        lo, "timeseries", "Judge cost per hour by metric",
        [prom_target(f"sum by (metric) (rate({COST}{{{mn.L_METRIC}=~\"$metric\"}}[{RI}])) "
                     f"* 3600", "{{metric}}")],
        w=8, unit="currencyUSD",
    ))
    p.append(panel(
        lo, "stat", "Judge cost (time range)",
        [prom_target(f"sum(increase({COST}{{{mn.L_METRIC}=~\"$metric\"}}[$__range]))", "cost",
                     instant=True, range=False),
         prom_target(f"sum(increase({CALLS}{{{mn.L_METRIC}=~\"$metric\"}}[$__range]))",
                     "judge calls", "B", instant=True, range=False)],
        w=8, unit="currencyUSD",
        options={"reduceOptions": {"calcs": ["lastNotNull"]}},
    ))

    p.append(lo.row("Backlog and lag"))
    p.append(panel(
        lo, "timeseries", "Backlog by state",
        [prom_target(f"sum by (state) ({BACKLOG})", "{{state}}")], w=8,
        description="pending/leased jobs and traces/conversations not yet planned.",
    ))
    p.append(panel(
        lo, "stat", "Oldest waiting target",
        [prom_target(f"max({BACKLOG_AGE})", "age", instant=True, range=False)],
        w=4, unit="s", options={"reduceOptions": {"calcs": ["lastNotNull"]}},
    ))
    p.append(panel(
        lo, "timeseries", "Lag from target end to score (p50, p99)",
        [prom_target(f"histogram_quantile(0.5, sum by (le) (rate({LAG}_bucket"
                     f"{{{mn.L_METRIC}=~\"$metric\"}}[{RI}])))", "p50"),
         prom_target(f"histogram_quantile(0.99, sum by (le) (rate({LAG}_bucket"
                     f"{{{mn.L_METRIC}=~\"$metric\"}}[{RI}])))", "p99", "B")],
        w=12, unit="s",
        description="Includes settle time (trace) or idle time (conversation) by design.",
    ))

    p.append(lo.row("Ingest"))
    p.append(panel(
        lo, "timeseries", "Receiver requests per second by status",
        [prom_target(f"sum by (code) (rate({REQUESTS}[{RI}]))", "{{code}}")], w=8,
        description="503 means the worker asked the Collector to back off (store behind).",
    ))
    p.append(panel(
        lo, "timeseries", "Spans received per second",
        [prom_target(f"sum(rate({SPANS_IN}[{RI}]))", "spans/s")], w=8,
    ))
    p.append(panel(
        lo, "timeseries", "Spans dropped per minute",
        [prom_target(f"sum by (reason) (rate({DROPPED}[{RI}])) * 60", "store {{reason}}"),
         prom_target(f"sum by (reason) (rate({EMIT_DROPPED}[{RI}])) * 60",
                     "scores {{reason}}", "B")],
        w=8, description="store: spans lost before the span store (their traces cannot be "
                         "evaluated); scores: evaluation spans the emitter could not send.",
    ))

    p.append(lo.row("Low scores -> traces"))
    p.append(panel(
        lo, "table", "Low scores ($metric under $low_score)",
        [{"refId": "A", "datasource": TEMPO, "queryType": "traceql", "limit": 20,
          "tableType": "traces", "query": low_score_traceql()}],
        w=12, h=10, datasource=TEMPO,
        description="Evaluation spans (child-span mode) scoring under the threshold. Click "
                    "a trace id to open the evaluated trace.",
    ))
    p.append(panel(
        lo, "table", "Failed evaluations of agent $agent",
        [{"refId": "A", "datasource": TEMPO, "queryType": "traceql", "limit": 20,
          "tableType": "traces", "query": failed_by_agent_traceql()}],
        w=12, h=10, datasource=TEMPO,
    ))
    _, pos = lo.place(24, 5)
    p.append({
        "type": "text", "id": lo.next_id - 1, "title": "Search in Jaeger", "gridPos": pos,
        "options": {"mode": "markdown", "content": (
            "Jaeger tag search (service `${eval_service}`):\n\n"
            f"- [failed evaluations]({jaeger_search_url({attr.GEN_AI_EVALUATION_SCORE_LABEL: 'fail'})})\n"  # noqa: E501
            f"- [faithfulness evaluations]({jaeger_search_url({attr.GEN_AI_EVALUATION_NAME: 'faithfulness'})})\n"  # noqa: E501
            f"- [evaluations that ended in an error]({jaeger_search_url({'error': 'true'})})\n\n"
            "Jaeger matches tag values exactly; use Tempo (TraceQL) for score thresholds. "
            "See docs/seeing-scores.md."
        )},
    })

    return {
        "uid": "spanjudge-overview",
        "title": "spanjudge",
        "description": "LLM-as-a-judge scores from spanjudge: quality, volume, spend, backlog.",
        "tags": ["spanjudge", "llm", "evaluation"],
        "timezone": "browser",
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables()},
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard",
        }]},
        "links": [
            {"title": "Tempo: low scores", "type": "link", "targetBlank": False,
             "url": tempo_explore_url(low_score_traceql())},
            {"title": "Jaeger: failed evaluations", "type": "link", "targetBlank": True,
             "url": jaeger_search_url({attr.GEN_AI_EVALUATION_SCORE_LABEL: "fail"})},
        ],
        "panels": p,
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the JSON is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run deploy/grafana/generate.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
