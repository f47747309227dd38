"""``evaluate()``: every metric on every applicable test case, concurrently, with a summary.

Example::

    from spanjudge import BiasMetric, FaithfulnessMetric, LLMTestCase, evaluate

    result = evaluate(cases, [FaithfulnessMetric(), BiasMetric()], max_concurrency=8)
    print(result.model_dump_json(indent=2))

Each (case, metric) runs on a fresh :meth:`~BaseMetric.clone` of the metric, so metric objects
can be shared. Failures are recorded per case (``error``/``error_type``), never raised; cases
missing a metric's required field are reported as skipped with the field named.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.outcome import MISSING_FIELD, run_sync
from spanjudge.evaluators._judge.metrics.schemas import MetricData
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase

DEFAULT_MAX_CONCURRENCY = 16
_START_BATCH = 16  # evaluations started per loop iteration


class MetricResult(MetricData):
    """One metric on one case: :class:`MetricData` plus whether it was skipped and why."""

    display_name: str
    skipped: bool = False
    skip_reason: str | None = None


class TestResult(BaseModel):
    """All metrics on one test case, in the order the metrics were given."""

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="forbid")

    index: int
    name: str | None = None
    conversational: bool = False
    success: bool
    """Every evaluated metric passed and none errored (skipped metrics do not count)."""
    metrics_data: list[MetricResult]


class MetricSummary(BaseModel):
    """Totals for one metric over all cases."""

    name: str
    display_name: str
    threshold: float
    evaluated: int = 0
    scored: int = 0
    passed: int = 0
    errors: int = 0
    skipped: int = 0
    mean_score: float | None = None
    pass_rate: float | None = None
    judge_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    evaluation_cost: float | None = None


class EvaluationResult(BaseModel):
    """What :func:`evaluate` returns; ``model_dump_json()`` gives the full report."""

    test_results: list[TestResult]
    metrics_summary: list[MetricSummary]
    duration_seconds: float
    max_concurrency: int = Field(ge=1)


def evaluate(
    test_cases: Sequence[LLMTestCase | ConversationalTestCase],
    metrics: Sequence[BaseMetric],
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    show_progress: bool = True,
    print_results: bool = True,
) -> EvaluationResult:
    """Run every metric on every applicable case; print a summary table; return the results.

    ``max_concurrency`` bounds the (case, metric) evaluations in flight; the judge applies its
    own request limit underneath. The progress bar shows only on a terminal. Safe to call
    inside a running event loop (it then runs on a worker thread).
    """
    return run_sync(
        a_evaluate(
            test_cases,
            metrics,
            max_concurrency=max_concurrency,
            show_progress=show_progress,
            print_results=print_results,
        )
    )


async def a_evaluate(
    test_cases: Sequence[LLMTestCase | ConversationalTestCase],
    metrics: Sequence[BaseMetric],
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    show_progress: bool = True,
    print_results: bool = True,
) -> EvaluationResult:
    """Async :func:`evaluate`."""
    if max_concurrency < 1:
        raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if not metrics:
        raise ConfigError("evaluate() needs at least one metric")
    started = time.perf_counter()
    gate = asyncio.Semaphore(max_concurrency)
    cells: list[list[MetricResult | None]] = [[None] * len(metrics) for _ in test_cases]
    jobs: list[tuple[int, int, BaseMetric]] = []
    for i, case in enumerate(test_cases):
        for j, metric in enumerate(metrics):
            missing = metric.missing_fields(case)
            if missing:
                cells[i][j] = _skipped(metric, case, missing)
            else:
                jobs.append((i, j, metric))

    progress = _Progress(len(jobs), enabled=show_progress)

    async def run(i: int, j: int, template: BaseMetric) -> None:
        metric = template.clone()
        async with gate:
            # a failure is recorded in the metric's error fields and reported per case
            with contextlib.suppress(Exception):
                await metric.a_measure(test_cases[i])
        cells[i][j] = MetricResult(
            **metric.to_data().model_dump(), display_name=metric.display_name
        )
        progress.advance()

    with progress:
        await asyncio.gather(*await _start(jobs, run))

    results = [
        _test_result(i, case, [c for c in cells[i] if c is not None])
        for i, case in enumerate(test_cases)
    ]
    result = EvaluationResult(
        test_results=results,
        metrics_summary=[_summary(j, m, results) for j, m in enumerate(metrics)],
        duration_seconds=time.perf_counter() - started,
        max_concurrency=max_concurrency,
    )
    if print_results:
        print_summary(result)
    return result


async def _start(
    jobs: Sequence[tuple[int, int, BaseMetric]],
    run: Callable[[int, int, BaseMetric], Coroutine[Any, Any, None]],
) -> list[asyncio.Task[None]]:
    """``run`` for every job as a task, ``_START_BATCH`` per loop iteration. Started all at
    once, a thousand evaluations build their first prompts in one go while the first judge
    answers wait unread and their slots idle (0.1-0.3 s at 32 slots)."""
    tasks: list[asyncio.Task[None]] = []
    try:
        for number, job in enumerate(jobs):
            if number and not number % _START_BATCH:
                await asyncio.sleep(0)  # read what arrived meanwhile
            tasks.append(asyncio.ensure_future(run(*job)))
    except BaseException:  # cancelled while starting: stop what was started
        for task in tasks:
            task.cancel()
        raise
    return tasks


def _skipped(metric: BaseMetric, case: Any, missing: list[str]) -> MetricResult:
    kind = type(case).__name__
    expected = "ConversationalTestCase" if metric.conversational else "LLMTestCase"
    if kind != expected:
        reason = (
            f"{metric.display_name} needs a {expected} (got {kind}): missing {', '.join(missing)}"
        )
    else:
        reason = f"missing required field(s): {', '.join(missing)}"
    return MetricResult(
        name=metric.name,
        display_name=metric.display_name,
        threshold=metric.threshold,
        strict_mode=metric.strict_mode,
        judge_model=metric.evaluation_model,
        error_type=MISSING_FIELD,
        skipped=True,
        skip_reason=reason,
    )


def _test_result(index: int, case: Any, data: list[MetricResult]) -> TestResult:
    evaluated = [d for d in data if not d.skipped]
    return TestResult(
        index=index,
        name=getattr(case, "name", None),
        conversational=isinstance(case, ConversationalTestCase),
        success=all(d.error is None and bool(d.success) for d in evaluated),
        metrics_data=data,
    )


def _summary(j: int, metric: BaseMetric, results: list[TestResult]) -> MetricSummary:
    rows = [r.metrics_data[j] for r in results]
    s = MetricSummary(
        name=metric.name, display_name=metric.display_name, threshold=metric.threshold
    )
    scores: list[float] = []
    costs: list[float] = []
    for d in rows:
        if d.skipped:
            s.skipped += 1
            continue
        s.evaluated += 1
        s.judge_calls += d.judge_calls
        s.input_tokens += d.input_tokens
        s.output_tokens += d.output_tokens
        if d.evaluation_cost is not None:
            costs.append(d.evaluation_cost)
        if d.error is not None or d.score is None:
            s.errors += 1
            continue
        scores.append(d.score)
        s.passed += int(bool(d.success))
    s.scored = len(scores)
    if scores:
        s.mean_score = sum(scores) / len(scores)
        s.pass_rate = s.passed / len(scores)
    s.evaluation_cost = sum(costs) if costs else None
    return s


def print_summary(result: EvaluationResult) -> None:
    """Print the per-metric summary table of ``result`` with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"spanjudge evaluation: {len(result.test_results)} cases, "
        f"{result.duration_seconds:.2f} s"
    )
    for col in (
        "Metric",
        "Threshold",
        "Mean",
        "Pass rate",
        "Errors",
        "Skipped",
        "Judge calls",
        "Tokens in/out",
        "Cost USD",
    ):
        table.add_column(col, justify="left" if col == "Metric" else "right", no_wrap=True)
    for s in result.metrics_summary:
        table.add_row(
            s.display_name,
            f"{s.threshold:g}",
            "-" if s.mean_score is None else f"{s.mean_score:.3f}",
            "-" if s.pass_rate is None else f"{s.pass_rate:.0%}",
            str(s.errors),
            str(s.skipped),
            str(s.judge_calls),
            f"{s.input_tokens}/{s.output_tokens}",
            "-" if s.evaluation_cost is None else f"{s.evaluation_cost:.4f}",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # logs and CI: do not squeeze the table into 80 columns
    console.print(table)


class _Progress:
    """A rich progress bar, only when enabled and stdout is a terminal."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar: Any = None
        self._task: Any = None
        if not enabled or total == 0:
            return
        from rich.console import Console

        console = Console()
        if not console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = self._bar.add_task("Evaluating", total=total)

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)
