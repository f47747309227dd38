"""The review commands: ``feedback``, ``calibration``, ``export``, ``scores`` and ``compare``.

They read and write the store the worker uses (``--store URL``, or ``--config`` for the
worker's settings file; default ``$SPANJUDGE_STORE_URL``, else ``./spanjudge.db``), so they work
on the embedded default where no tracing backend runs. Registered on the ``spanjudge`` group by
:mod:`spanjudge.cli.app`. Exit codes as every command's (:mod:`spanjudge.cli.common`): 2 when
the store file or the target is not there, or an argument is refused (the message names it).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from spanjudge.cli.common import (
    TRACE_ID_CHARS,
    load_cli_settings,
    opened_store,
    opened_stores,
    resolve_trace_id,
    since_option_value,
    store_options,
    stores_options,
    usage_error,
)
from spanjudge.cli.numbers import compare, period_text, print_summary, summary_of
from spanjudge.cli.numbers import console as _console

if TYPE_CHECKING:
    from spanjudge.evaluators._review.agreement import Agreement, Estimate
    from spanjudge.settings import WorkerSettings

__all__ = ["COMMANDS"]

REASON_CHARS = 80


def _rules(settings: WorkerSettings) -> list[Any]:
    """The configured rules (judge calls refused), or none without a rules setting."""
    from spanjudge.evaluators._review.explain import OfflineJudge
    from spanjudge.worker.rule_config import build_rules

    if not (settings.rules or settings.rules_entrypoint):
        return []
    return build_rules(settings, OfflineJudge(settings.judge_model))


# ------------------------------------------------------------------------------ feedback
@click.command()
@click.argument("trace_id", required=False)
@click.option("--metric", required=True, help="The metric the label is about (faithfulness...).")
@click.option("--label", required=True, type=click.Choice(["pass", "fail"]))
@click.option("--span", "span_id", default=None, help="Label one span of the trace.")
@click.option("--conversation", "conversation_id", default=None, help="Label a conversation.")
@click.option("--score", type=float, default=None, help="Your own score in [0, 1].")
@click.option("--note", default=None, help="Why (kept with the label, shown in the trace).")
@click.option("--annotator", default=None, help="Who labels (a name or an id).")
@click.option("--rule", default=None, help="Only this rule's results (default: every rule).")
@store_options
def feedback(
    trace_id: str | None,
    metric: str,
    label: str,
    span_id: str | None,
    conversation_id: str | None,
    score: float | None,
    note: str | None,
    annotator: str | None,
    rule: str | None,
    config_path: str | None,
    store_url: str | None,
) -> None:
    """Record a person's pass/fail label on a trace, a span or a conversation.

    TRACE_ID may be its first characters when only one stored trace starts with them."""
    from spanjudge._core.urls import redact_url
    from spanjudge.human_feedback import parse_feedback, record_feedback

    settings = load_cli_settings(config_path, store_url)
    # only a shortened id is looked up first: a whole one is checked after the label is
    if trace_id is not None and len(trace_id.strip()) < TRACE_ID_CHARS:
        with opened_store(settings.store_url, schema=settings.store_schema) as store:
            trace_id = resolve_trace_id(store, trace_id, where=redact_url(settings.store_url))
    given = {
        "trace_id": trace_id,
        "span_id": span_id,
        "conversation_id": conversation_id,
        "metric": metric,
        "label": label,
        "score": score,
        "note": note,
        "annotator": annotator,
        "rule": rule,
    }
    # a refused label (FeedbackError) is a usage error: the group exits 2 with its message
    item = parse_feedback({k: v for k, v in given.items() if v is not None}, source="cli")
    with opened_store(settings.store_url, schema=settings.store_schema) as store:
        metrics = [r.metric.name for r in _rules(settings)]
        stored = record_feedback(store, item, metrics=metrics)
    target = conversation_id or f"{stored.trace_id}" + (f"/{span_id}" if span_id else "")
    click.echo(f"feedback {stored.feedback_id}: {metric} {label} on {target}")


# ------------------------------------------------------------------------------ calibration
def _ci(estimate: Estimate) -> str:
    if estimate.value is None:
        return "-"
    if estimate.low is None or estimate.high is None:
        return f"{estimate.value:.2f}"
    return f"{estimate.value:.2f} [{estimate.low:.2f}, {estimate.high:.2f}]"


@click.command()
@click.option("--since", default="30d", show_default=True, help="Labels of this period (6h, 30d).")
@click.option("--metric", default=None, help="Only this metric.")
@click.option("--rule", default=None, help="Only this rule.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@stores_options
def calibration(
    since: str,
    metric: str | None,
    rule: str | None,
    as_json: bool,
    config_path: str | None,
    store_urls: tuple[str, ...],
) -> None:
    """How often the judge agrees with people, per rule and metric (95% intervals). With
    --store given once per worker group, the labelled results of every group count."""
    from spanjudge.evaluators._review.agreement import agreement

    settings = load_cli_settings(config_path)
    start = since_option_value(since)
    with opened_stores(settings, store_urls) as stores:
        labelled = [
            item
            for store in stores
            for item in store.labelled_results(metric=metric, rule=rule, since=start)
        ]
    tables = agreement(labelled)
    if as_json:
        click.echo(json.dumps([asdict(t) for t in tables], indent=2))
        return
    _print_calibration(tables, settings.agreement_min_labels, since)


def _print_calibration(tables: list[Agreement], min_labels: int, since: str) -> None:
    from rich.table import Table

    console = _console()
    if not tables:
        console.print(
            f"no labelled results in the last {since}: label some with spanjudge feedback"
        )
        return
    table = Table(title=f"judge vs people, last {since} (fail = positive; 95% intervals)")
    for name in ("rule", "metric", "labels", "accuracy", "fails caught (TPR)",
                 "passes passed (TNR)", "Cohen's kappa", "TP/FP/FN/TN"):  # fmt: skip
        table.add_column(name, overflow="fold")
    for t in tables:
        table.add_row(
            t.rule,
            t.metric,
            str(t.labels) + (" (few)" if t.labels < min_labels else ""),
            _ci(t.accuracy),
            _ci(t.true_positive_rate),
            _ci(t.true_negative_rate),
            _ci(t.kappa),
            f"{t.both_fail}/{t.judge_only_fail}/{t.judge_only_pass}/{t.both_pass}",
        )
    console.print(table)
    console.print(f"(few): under agreement_min_labels = {min_labels}; the alert waits for them")


# ------------------------------------------------------------------------------ export
@click.command()
@click.option("--metric", default=None, help="Only this metric's results.")
@click.option("--rule", default=None, help="Only this rule's results.")
@click.option(
    "--label",
    type=click.Choice(["pass", "fail"]),
    default=None,
    help="Only this verdict: a person's label when there is one, else the judge's.",
)
@click.option("--since", default=None, help="Results of this period (7d); default: all.")
@click.option(
    "--format", "fmt", type=click.Choice(["deepeval", "jsonl"]), default="deepeval",
    show_default=True, help="deepeval: a JSON list of goldens; jsonl: one per line.",
)  # fmt: skip
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@store_options
def export(
    metric: str | None,
    rule: str | None,
    label: str | None,
    since: str | None,
    fmt: str,
    output: str,
    config_path: str | None,
    store_url: str | None,
) -> None:
    """Write the rebuilt test cases of stored results as a regression dataset."""
    from spanjudge.evaluators._judge.dataset import write_dataset
    from spanjudge.evaluators._review.export import export_cases

    settings = load_cli_settings(config_path, store_url)
    start = since_option_value(since)
    rules = {r.name: r for r in _rules(settings)}
    with opened_store(settings.store_url, schema=settings.store_schema) as store:
        found = export_cases(store, metric=metric, rule=rule, label=label, since=start, rules=rules)
    kinds = {item.result.target_type == "conversation" for item in found.items}
    if len(kinds) > 1:  # deepeval refuses the mix in either file format
        usage_error(
            "a dataset holds single-turn or conversation cases, not both: "
            "pick one kind with --metric or --rule"
        )
    goldens = [item.golden() for item in found.items]
    written = _write_new(output, lambda path: write_dataset(goldens, path, fmt))
    click.echo(f"wrote {written} test case(s) to {output} ({fmt})")
    for result, reason in found.skipped:
        click.echo(f"not rebuilt: {result.rule} {result.target_id}: {reason}", err=True)


def _write_new(output: str, write: Callable[[str], int]) -> int:
    """``write(path)`` into a file of our own beside ``output`` (created exclusively, mode
    0600: it holds trace content), then renamed onto ``output``. A symbolic link at ``output``
    is refused: written through, it would overwrite whatever file it points to (a link
    planted in a shared folder); a rename replaces the path itself, never a link's target."""
    path = Path(output)
    if path.is_symlink():
        usage_error(f"{output} is a symbolic link: refusing to write through it")
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    try:
        written = write(temp)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return written


# ------------------------------------------------------------------------------ scores
@click.command()
@click.option("--metric", default=None, help="Only this metric.")
@click.option("--rule", default=None, help="Only this rule.")
@click.option("--label", type=click.Choice(["pass", "fail", "error", "skipped"]), default=None)
@click.option(
    "--since", default=None,
    help="Results of this period (24h). Default: 24h; with --summary the settings' "
    "interval_window_seconds.",
)  # fmt: skip
@click.option("--service", default=None, help="Only results of this service.")
@click.option("--limit", default=50, show_default=True, help="The most recent N results.")
@click.option(
    "--summary", is_flag=True,
    help="Pass rate and mean score per rule (and segment) with 95% intervals, not results.",
)  # fmt: skip
@click.option("--by", "key", default=None, help="With --summary: split by service.version, ...")
@click.option(
    "--cap", type=int, default=None,
    help="With --summary: segments shown per rule; the rest are folded into 'other'. "
    "Default: the settings' segment_cap (10).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="With --summary: print JSON.")
@stores_options
def scores(
    metric: str | None,
    rule: str | None,
    label: str | None,
    since: str | None,
    service: str | None,
    limit: int,
    summary: bool,
    key: str | None,
    cap: int | None,
    as_json: bool,
    config_path: str | None,
    store_urls: tuple[str, ...],
) -> None:
    """Print recent results as a table, for setups without a tracing backend; with
    --summary, each rule's pass rate and mean score with their intervals (with --store given
    once per worker group, each group's sums added up)."""
    from spanjudge._core.telemetry import evaluation_label
    from spanjudge.rule_settings import precision_targets

    if (key is not None or as_json) and not summary:
        usage_error("--by and --json go with --summary")
    if len(store_urls) > 1 and not summary:
        usage_error("--store given several times goes with --summary")
    if cap is not None and cap < 1:
        usage_error(f"--cap must be at least 1, got {cap}")
    settings = load_cli_settings(config_path)
    if summary:
        since = since or period_text(settings.interval_window_seconds)
        start = since_option_value(since)
        with opened_stores(settings, store_urls) as stores:
            rows = summary_of(
                stores, by=key, since=start, rule=rule, cap=cap or settings.segment_cap,
                targets=precision_targets(settings.rules),
            )  # fmt: skip
        rows = [r for r in rows if metric is None or r.metric == metric]
        print_summary(rows, by=key, since=since, as_json=as_json)
        return
    since = since or "24h"
    start = since_option_value(since)
    with opened_stores(settings, store_urls) as [store]:
        results = [
            r
            for r in store.results(metric=metric, rule=rule, since=start, limit=100_000)
            if (label is None or evaluation_label(r) == label)
            and (service is None or r.service_name == service)
        ][-limit:]
        labels = store.feedback_on(results)
    _print_scores(results, labels, since)


def _print_scores(results: list[Any], labels: list[list[Any]], since: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from spanjudge._core.telemetry import evaluation_label

    console = _console()
    if not results:
        console.print(f"no results in the last {since}")
        return
    table = Table(title=f"{len(results)} most recent result(s), last {since}")
    for name in ("trace id", "target", "metric", "score", "label", "human"):
        table.add_column(name, no_wrap=True)
    table.add_column("reason", overflow="fold")
    table.add_column("judge model", overflow="fold")
    table.add_column("cost", no_wrap=True)
    for r, people in zip(results, labels, strict=True):
        reason = r.reason or r.skip_reason or r.error_message or ""
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 3] + "..."
        table.add_row(
            r.trace_id or "-",
            f"{r.target_type} {r.target_id}",
            r.metric,
            "-" if r.score is None else f"{r.score:.2f}",
            evaluation_label(r),
            people[-1].label if people else "",
            escape(reason),
            r.judge_model or "-",
            "-" if r.cost is None else f"${r.cost:.5f}",
        )
    console.print(table)


COMMANDS = (feedback, calibration, export, scores, compare)
