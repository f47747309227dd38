"""``scores --summary`` and ``compare``: pass rates and mean scores with intervals, and the
difference between two segments (versions) with an anytime-valid decision.

Both read the sums the store adds up (``summary_sums``) and compute with
:mod:`~spanjudge.evaluators._review.estimates` and
:mod:`~spanjudge.evaluators._review.regressions` (methods: docs/numbers.md). Registered
by :mod:`spanjudge.cli.review`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from spanjudge.cli.common import (
    load_cli_settings,
    opened_stores,
    since_option_value,
    stores_options,
    usage_error,
)

if TYPE_CHECKING:
    from spanjudge._store.summaries import SegmentSums, SummarySource
    from spanjudge.evaluators._review.agreement import Estimate
    from spanjudge.evaluators._review.estimates import SegmentSummary
    from spanjudge.evaluators._review.regressions import Comparison, Effect

__all__ = [
    "compare",
    "console",
    "period_text",
    "print_summary",
    "summary_of",
]

# piped output (a file, a CI log) is not cut to 80 columns: ids stay whole
PIPED_WIDTH = 240


def merged_sums(
    stores: Any, by: str | None, since: float | None, rule: str | None
) -> dict[tuple[str, str, str], SegmentSums]:
    """The summary sums of ``stores`` (one store or several: one per worker group) added up.
    Every field is a count or a sum (first/last times a min/max), so the merged sums are
    exactly those of one store holding every result."""
    from spanjudge._store.summaries import SegmentSums

    out: dict[tuple[str, str, str], SegmentSums] = {}
    for store in stores if isinstance(stores, list) else [stores]:
        source: SummarySource = store
        for group, s in source.summary_sums(by=by, since=since, rule=rule).items():
            out.setdefault(group, SegmentSums()).add(s)
    return out


def summary_of(
    store: Any,
    *,
    by: str | None,
    since: float | None,
    rule: str | None,
    cap: int,
    targets: Mapping[str, float] | None = None,
) -> list[SegmentSummary]:
    """The summary rows of ``store`` (or a list of stores, summed): per rule x segment of
    ``by``, ``cap`` segments each; ``targets`` (rule -> ``target_half_width``) marks the rows
    whose interval misses it (``under_covered``)."""
    from spanjudge.evaluators._review.estimates import fold_segments, summarize

    sums, folded = fold_segments(merged_sums(store, by, since, rule), cap)
    return summarize(sums, by=by, folded=folded, targets=targets)


def period_text(seconds: float) -> str:
    """``86400`` -> ``"24h"``, ``604800`` -> ``"7d"``: a settings window as ``--since`` says it."""
    if seconds >= 2 * 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g}d"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"


def _ci(estimate: Estimate, digits: int = 2) -> str:
    if estimate.value is None:
        return "-"
    if estimate.low is None or estimate.high is None:
        return f"{estimate.value:.{digits}f}"
    return f"{estimate.value:.{digits}f} [{estimate.low:.{digits}f}, {estimate.high:.{digits}f}]"


def console() -> Any:
    """A rich console; piped output (a file, a CI log) is not cut to 80 columns."""
    from rich.console import Console

    out = Console(highlight=False)
    return out if out.is_terminal else Console(highlight=False, width=PIPED_WIDTH)


def print_summary(rows: list[SegmentSummary], *, by: str | None, since: str, as_json: bool) -> None:
    """The summary as a table (or JSON: one object per row)."""
    if as_json:
        click.echo(json.dumps([asdict(row) for row in rows], indent=2))
        return
    from rich.table import Table

    screen = console()
    if not rows:
        screen.print(f"no results in the last {since}")
        return
    split = f" by {by}" if by else ""
    table = Table(title=f"results of the last {since}{split} (95% intervals)")
    for name in ("rule", "metric", by or "segment", "scored", "skipped", "errors"):
        table.add_column(name, overflow="fold")
    for name in ("pass rate", "n_eff", "mean score"):
        table.add_column(name, no_wrap=True)
    targeted = any(row.target_half_width is not None for row in rows)
    if targeted:
        table.add_column("target", no_wrap=True)
    for row in rows:
        segment = row.segment + (f" ({row.folded} segments)" if row.folded else "")
        cells = [
            row.rule, row.metric, segment, str(row.scored), str(row.skipped), str(row.errors),
            _ci(row.pass_rate), f"{row.effective_n:.0f}", _ci(row.mean_score),
        ]  # fmt: skip
        if targeted:
            cells.append(_target_text(row))
        table.add_row(*cells)
    screen.print(table)
    short = [row for row in rows if row.under_covered]
    if short:
        screen.print(
            f"{len(short)} segment(s) under-covered: their interval is wider than the rule's "
            "target_half_width (too little traffic, or budget, for that precision)"
        )


def _target_text(row: SegmentSummary) -> str:
    if row.target_half_width is None:
        return ""
    mark = "under-covered" if row.under_covered else "met"
    return f"±{row.target_half_width:g} {mark}"


def _effect_text(effect: Effect) -> str:
    if effect.difference.value is None:
        return "-"
    return _ci(effect.difference, 3)


@click.command()
@click.argument("baseline")
@click.argument("candidate")
@click.option("--by", "key", required=True, help="The segment key: service.version, model, ...")
@click.option("--rule", default=None, help="Only this rule.")
@click.option(
    "--since", default=None,
    help="Results of this period (7d). Default: the settings' regression_window_seconds.",
)  # fmt: skip
@click.option(
    "--alpha", type=float, default=None,
    help="Error rate of the decision. Default: the settings' regression_alpha (0.05).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@stores_options
def compare(
    baseline: str,
    candidate: str,
    key: str,
    rule: str | None,
    since: str | None,
    alpha: float | None,
    as_json: bool,
    config_path: str | None,
    store_urls: tuple[str, ...],
) -> None:
    """Whether CANDIDATE's pass rate or mean score differs from BASELINE's, per rule.

    Two values of one segment key (`--by service.version 1.4.0 1.5.0`). The effect is
    CANDIDATE minus BASELINE with an interval that is a confidence sequence: it stays valid
    however often you look, so run it after every deploy and again tomorrow. The decision is
    worse, better, no difference yet or too few. With --store given once per worker group,
    each group's sums are added up first. Methods: docs/numbers.md."""
    from spanjudge.evaluators._review.regressions import compare_segments

    if alpha is not None and not 0 < alpha < 1:
        usage_error(f"--alpha must be between 0 and 1, got {alpha}")
    settings = load_cli_settings(config_path)
    alpha = settings.regression_alpha if alpha is None else alpha
    since = since or period_text(settings.regression_window_seconds)
    start = since_option_value(since)
    with opened_stores(settings, store_urls) as stores:
        sums = merged_sums(stores, key, start, rule)
    rows = compare_segments(sums, key=key, baseline=baseline, candidate=candidate, alpha=alpha)
    if as_json:
        click.echo(json.dumps([asdict(row) for row in rows], indent=2))
        return
    _print_compare(rows, key, baseline, candidate, since, alpha)


def _print_compare(
    rows: list[Comparison], key: str, baseline: str, candidate: str, since: str, alpha: float
) -> None:
    from rich.table import Table

    screen = console()
    if not rows:
        screen.print(f"no results with {key} = {baseline} or {candidate} in the last {since}")
        return
    level = f"{1 - alpha:.0%}"
    table = Table(
        title=f"{key}: {candidate} against {baseline}, last {since} "
        f"({level} confidence sequences, valid at any time)"
    )
    for name in ("rule", "metric", f"{baseline} pass rate", f"{candidate} pass rate"):
        table.add_column(name, overflow="fold")
    for name in ("pass rate effect", "decision", "mean score effect", "decision"):
        table.add_column(name, no_wrap=True)
    for row in rows:
        table.add_row(
            row.rule, row.metric, _ci(row.pass_rate.baseline), _ci(row.pass_rate.candidate),
            _effect_text(row.pass_rate), row.pass_rate.decision,
            _effect_text(row.mean_score), row.mean_score.decision,
        )  # fmt: skip
    screen.print(table)
