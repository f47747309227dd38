"""The queries and links of the spanjudge dashboard, as plain strings: PromQL over the series
and labels of :mod:`spanjudge._core.metric_names`, TraceQL over the span attributes of
:mod:`spanjudge.tracer._attributes`, LogQL over the same attributes as Loki stores them on the
``gen_ai.evaluation.result`` events. ``generate.py`` beside this file puts them on panels.

Example::

    >>> SCORE_MEAN.startswith("sum by (metric) (rate(spanjudge_evaluation_score_sum{")
    True
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME

from spanjudge._core import metric_names as mn
from spanjudge.tracer import _attributes as attr
from spanjudge.worker import numbers as nm

PROM_UID = "prometheus"
TEMPO_UID = "tempo"
LOKI_UID = "loki"
RI = "$__rate_interval"
RANGE = "$__range"
LE = "le"  # Prometheus' bucket label of every histogram


# --- series and labels: every name from metric_names.py ------------------------------------


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
AGREEMENT = scraped(mn.JUDGE_AGREEMENT)

SEGMENT_PASS_RATE = scraped(nm.PASS_RATE)  # bound: estimate | low | high
REGRESSION = scraped(nm.REGRESSION)

# the dashboard's variables narrow every evaluation series
METRIC_SEL = f'{mn.L_METRIC}=~"$metric"'
SEL = f'{METRIC_SEL}, {mn.L_SERVICE}=~"$service"'


def legend(*labels: str, prefix: str = "") -> str:
    """A legend naming each series by its labels: ``legend("metric", prefix="p50 ")``."""
    return prefix + " ".join("{{" + label + "}}" for label in labels)


def by(*labels: str) -> str:
    return f"sum by ({', '.join(labels)})"


def per(scale: int, labels: tuple[str, ...], series: str, selector: str = "") -> str:
    """Rate of ``series`` summed by ``labels``, times ``scale`` (60: per minute)."""
    grouped = f"{by(*labels)} " if labels else "sum"
    matcher = f"{{{selector}}}" if selector else ""
    rate = f"{grouped}(rate({series}{matcher}[{RI}]))"
    return rate if scale == 1 else f"{rate} * {scale}"


def quantile(q: float, series: str, selector: str, *labels: str) -> str:
    """``q``-quantile of a histogram, per ``labels``."""
    buckets = f"rate({series}_bucket{{{selector}}}[{RI}])"
    return f"histogram_quantile({q}, {by(*labels, LE)} ({buckets}))"


def pass_rate(window: str) -> str:
    """Passed / decided per metric. A metric whose evaluations all failed has no ``pass``
    series; ``or 0 * ...`` supplies its zero so it shows 0% instead of vanishing."""
    dec = f'{EVALS}{{{SEL}, {mn.L_LABEL}=~"pass|fail"}}'
    passed = f'{EVALS}{{{SEL}, {mn.L_LABEL}="pass"}}'
    m = by(mn.L_METRIC)
    return (
        f"({m} (increase({passed}[{window}])) or {m} (0 * increase({dec}[{window}]))) "
        f"/ {m} (increase({dec}[{window}]))"
    )


def agreement(stat: str, *labels: str) -> str:
    """One statistic of the judge-human agreement gauge (``kappa``, ``labels``, ``floor``...),
    per ``labels``."""
    grouped = f"max by ({', '.join(labels)})" if labels else "max"
    return f'{grouped} ({AGREEMENT}{{{mn.L_STAT}="{stat}", {METRIC_SEL}}})'


def label_values(label: str, series: str = EVALS) -> str:
    """A variable query listing the values of ``label`` on ``series`` (the evaluations
    counter by default)."""
    return f"label_values({series}, {label})"


# the band panel's variables: one rule, one segment key, one segment (a band per series)
BAND_VARIABLES = (
    ("band_rule", mn.L_RULE),
    ("band_key", "segment_key"),
    ("band_segment", "segment"),
)
BAND_SEL = ", ".join(f'{label}=~"${name}"' for name, label in BAND_VARIABLES)


def pass_rate_bound(bound: str) -> str:
    """One bound (``estimate``, ``low``, ``high``) of the pass rate of the band's selection,
    as one series (``max``: the variables may match more than one when set to a regex)."""
    return f'max({SEGMENT_PASS_RATE}{{{METRIC_SEL}, {BAND_SEL}, bound="{bound}"}})'


def regression(stat: str) -> str:
    """A statistic of the worker's comparison of each candidate segment with its baseline."""
    labels = (mn.L_RULE, "measure", "baseline", "candidate")
    return f'min by ({", ".join(labels)}) ({REGRESSION}{{{METRIC_SEL}, {mn.L_STAT}="{stat}"}})'


_M = by(mn.L_METRIC)
SCORE_MEAN = f"{_M} (rate({SCORE}_sum{{{SEL}}}[{RI}])) / {_M} (rate({SCORE}_count{{{SEL}}}[{RI}]))"
SCORE_BUCKETS = f"{by(LE)} (increase({SCORE}_bucket{{{SEL}}}[{RI}]))"
OUTCOMES_PER_MIN = per(60, (mn.L_LABEL,), EVALS, SEL)
ERRORS_PER_MIN = per(60, (mn.L_METRIC,), EVALS, f'{SEL}, {mn.L_LABEL}="error"')
SKIPPED_PER_MIN = per(60, (mn.L_REASON,), SKIPPED)
TOKENS_PER_MIN = per(60, (mn.L_MODEL, mn.L_DIRECTION), TOKENS, METRIC_SEL)
COST_PER_HOUR = per(3600, (mn.L_METRIC,), COST, METRIC_SEL)
COST_IN_RANGE = f"sum(increase({COST}{{{METRIC_SEL}}}[{RANGE}]))"
CALLS_IN_RANGE = f"sum(increase({CALLS}{{{METRIC_SEL}}}[{RANGE}]))"
BACKLOG_BY_STATE = f"{by(mn.L_STATE)} ({BACKLOG})"
OLDEST_WAITING = f"max({BACKLOG_AGE})"
REQUESTS_PER_S = per(1, (mn.L_CODE,), REQUESTS)
SPANS_PER_S = per(1, (), SPANS_IN)
STORE_DROPS_PER_MIN = per(60, (mn.L_REASON,), DROPPED)
SCORE_DROPS_PER_MIN = per(60, (mn.L_REASON,), EMIT_DROPPED)


# --- TraceQL and links ---------------------------------------------------------------------


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
    return f'{{ span.{attr.GEN_AI_EVALUATION_NAME} =~ "$metric" && span.{attr.ERROR_TYPE} != nil }}'


def tempo_explore_url(query: str) -> str:
    """A Grafana Explore link running ``query`` in Tempo over the dashboard's time range."""
    pane = {
        "datasource": TEMPO_UID,
        "queries": [
            {
                "refId": "A",
                "datasource": {"type": "tempo", "uid": TEMPO_UID},
                "queryType": "traceql",
                "query": query,
            }
        ],
        "range": {"from": "${__from}", "to": "${__to}"},
    }
    # keep ${...} unescaped: Grafana interpolates them before following the link
    return "/explore?schemaVersion=1&orgId=1&panes=" + quote(
        json.dumps({"scores": pane}, separators=(",", ":")), safe="${}"
    )


def jaeger_search_url(tags: dict[str, str]) -> str:
    """A Jaeger UI tag search in the evaluation spans' service over the last hour."""
    return "${jaeger_url}/search?service=${eval_service}&lookback=1h&limit=50&tags=" + quote(
        json.dumps(tags, separators=(",", ":")), safe="${}"
    )


FIELD_METRIC = f"${{__field.labels.{mn.L_METRIC}}}"  # the clicked series' metric
JAEGER_FAILED = jaeger_search_url({attr.GEN_AI_EVALUATION_SCORE_LABEL: "fail"})
JAEGER_SEARCHES = (
    ("failed evaluations", JAEGER_FAILED),
    ("faithfulness evaluations", jaeger_search_url({attr.GEN_AI_EVALUATION_NAME: "faithfulness"})),
    ("evaluations that ended in an error", jaeger_search_url({"error": "true"})),
)


# --- LogQL: the evaluation events in Loki --------------------------------------------------


def stored(attribute: str) -> str:
    """The name Loki gives an OTLP attribute: each character other than a letter, digit or ``_``
    becomes ``_``. Log attributes become structured metadata under that name, the resource's
    ``service.name`` the stream label ``service_name``.

    >>> stored("gen_ai.evaluation.score.label")
    'gen_ai_evaluation_score_label'
    """
    return re.sub(r"[^A-Za-z0-9_]", "_", attribute)


RESULT_EVENT = attr.GEN_AI_EVALUATION_RESULT_EVENT
SERVICE_LABEL = stored(SERVICE_NAME)
EVENT_NAME = stored(attr.GEN_AI_EVALUATION_NAME)
EVENT_LABEL = stored(attr.GEN_AI_EVALUATION_SCORE_LABEL)


def failed_events_logql(service: str = "$eval_service", metric: str = "$metric") -> str:
    """LogQL: failed evaluation events of ``metric`` from the worker ``service``, one line each
    with score, rule and the judge's explanation."""
    line = " ".join(
        (
            f"{{{{.{EVENT_NAME}}}}}",
            f"{{{{.{stored(attr.GEN_AI_EVALUATION_SCORE_VALUE)}}}}}",
            f"({{{{.{stored(attr.SPANJUDGE_EVAL_RULE)}}}}}):",
            f"{{{{.{stored(attr.GEN_AI_EVALUATION_EXPLANATION)}}}}}",
        )
    )
    return (
        f'{{{SERVICE_LABEL}="{service}"}} | {EVENT_LABEL}="fail" | {EVENT_NAME}=~"{metric}" '
        f"| line_format `{line}`"
    )
