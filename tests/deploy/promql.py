"""The PromQL the deploy/ folder ships: found in the dashboards and the alert rules.

Both the offline checks (syntax via promtool, metric names) and the live test against a
real Prometheus read expressions through here, so they cannot drift apart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spanjudge._core import metric_names as mn
from spanjudge.worker import numbers

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
RULE_FILES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
PROM_UIDS = {"prometheus"}

# Grafana's built-in interval variables and a stand-in for "All" in our template variables.
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "5m",
}
ALL_VALUE = ".*"

_COUNTER = "counter"
_HISTOGRAM = "histogram"
_GAUGE = "gauge"
# What kind of instrument each name in metric_names.py is (it decides the scraped suffixes).
INSTRUMENT_KINDS = {
    mn.EVALUATION_SCORE: _HISTOGRAM,
    mn.EVALUATIONS: _COUNTER,
    mn.EVALUATION_LAG: _HISTOGRAM,
    mn.JUDGE_TOKENS: _COUNTER,
    mn.JUDGE_COST: _COUNTER,
    mn.JUDGE_CALLS: _COUNTER,
    mn.JUDGE_CACHE_HITS: _COUNTER,
    mn.BACKLOG: _GAUGE,
    mn.BACKLOG_AGE: _GAUGE,
    mn.SAMPLER_SKIPPED: _COUNTER,
    mn.EXPORTER_DROPPED: _COUNTER,
    mn.EXPORTER_WRITTEN: _COUNTER,
    mn.EMITTER_DROPPED: _COUNTER,
    mn.EMITTER_EVENTS_NOT_ACCEPTED: _COUNTER,
    mn.RECEIVER_REQUESTS: _COUNTER,
    mn.RECEIVER_SPANS: _COUNTER,
    mn.ENRICH_FORWARDED: _COUNTER,
    mn.ENRICH_FORWARD_FAILED: _COUNTER,
    mn.PLANNER_UNRECOGNISED_SPANS: _COUNTER,
    mn.RULES_NO_TARGET: _COUNTER,
    mn.JUDGE_AGREEMENT: _GAUGE,
    mn.JUDGE_OUTAGES: _COUNTER,
    mn.JUDGE_FAILED_ATTEMPTS: _COUNTER,
    mn.JUDGE_GAVE_UP: _COUNTER,
    mn.JUDGE_DOWN: _GAUGE,
    mn.PLANNER_LATE_SPANS: _COUNTER,
    mn.PLANNER_REPLANNED: _COUNTER,
    mn.STORE_FILE_CHANGES: _COUNTER,
    mn.INGEST_SPANS: _COUNTER,
    # the worker's numbers (spanjudge/worker/numbers.py), on the same meter
    **dict.fromkeys(numbers.METRICS, _GAUGE),
}


def scraped_names() -> set[str]:
    """Every series name Prometheus scrapes from the instruments in metric_names.py."""
    out: set[str] = set()
    for name, kind in INSTRUMENT_KINDS.items():
        base = name.replace(".", "_")
        if kind == _COUNTER:
            out.add(base + "_total")
        elif kind == _HISTOGRAM:
            out.update({base + "_bucket", base + "_sum", base + "_count"})
        else:
            out.add(base)
    return out


@dataclass(frozen=True)
class Expression:
    """One PromQL expression and where it was found (for failure messages)."""

    source: str
    expr: str


def dashboard_expressions(paths: list[Path] | None = None) -> list[Expression]:
    """Every Prometheus target ``expr`` of every panel (rows included) in the dashboards."""
    out: list[Expression] = []
    for path in paths if paths is not None else DASHBOARDS:
        board = json.loads(path.read_text(encoding="utf-8"))
        for panel in _panels(board.get("panels", [])):
            for target in panel.get("targets", []):
                ds = target.get("datasource") or panel.get("datasource") or {}
                if ds.get("uid") in PROM_UIDS and "expr" in target:
                    out.append(Expression(f"{path.name}: {panel['title']}", target["expr"]))
    return out


@dataclass(frozen=True)
class Variable:
    """A dashboard template variable filled by ``label_values(series, label)``."""

    name: str
    series: str
    label: str


_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*([A-Za-z_]\w*)\)$")


def dashboard_variables(paths: list[Path] | None = None) -> list[Variable]:
    """Every Prometheus ``label_values(...)`` query variable of the dashboards."""
    out: list[Variable] = []
    for path in paths if paths is not None else DASHBOARDS:
        board = json.loads(path.read_text(encoding="utf-8"))
        for var in board.get("templating", {}).get("list", []):
            ds = var.get("datasource") or {}
            if var.get("type") != "query" or ds.get("uid") not in PROM_UIDS:
                continue
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = _LABEL_VALUES.match(query.strip())
            if match is None:
                raise ValueError(f"{path.name}: variable {var['name']}: unsupported {query!r}")
            out.append(Variable(var["name"], match.group(1).strip(), match.group(2)))
    return out


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for p in panels:
        flat.append(p)
        flat.extend(_panels(p.get("panels", [])))
    return flat


def rule_expressions(paths: list[Path] | None = None) -> list[Expression]:
    """Every ``expr`` of every alerting or recording rule."""
    out: list[Expression] = []
    for path in paths if paths is not None else RULE_FILES:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in doc["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule.get("record")
                out.append(Expression(f"{path.name}: {name}", rule["expr"].strip()))
    return out


def substitute(expr: str) -> str:
    """Replace Grafana variables with values Prometheus accepts ($metric etc. -> ``.*``)."""
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return re.sub(r"\$\{?[A-Za-z_]\w*\}?", ALL_VALUE, expr)


_COMPARISON = re.compile(r"(<=|>=|==|!=|<|>)\s*(?!bool\b)(?=[-+]?[0-9.])")


def as_signal(expr: str) -> str:
    """Turn filtering comparisons against a number into ``bool`` ones.

    ``x < 0.8`` returns nothing while the condition is false; ``x < bool 0.8`` returns 0/1 for
    every series, so a live Prometheus shows whether the alert's inputs exist at all.
    Label matchers (``label="x"``, ``=~``) are untouched: they never precede a bare number.
    """
    return _COMPARISON.sub(lambda m: f"{m.group(1)} bool ", expr)


_NAME = re.compile(r"\bspanjudge_[a-z0-9_]+\b")


def metric_names_in(expr: str) -> set[str]:
    """The spanjudge series names an expression refers to."""
    return set(_NAME.findall(expr))
