"""A metric's last result, kept and handed on the same way by every kind of metric: the judged
ones (:class:`~spanjudge.evaluators._judge.metrics.base.BaseMetric`), the deterministic
trajectory checks and wrapped deepeval metrics. An :class:`Outcome` holds deepeval's attribute
names (``score``, ``reason``, ``success``, ``error``...), records a failure with its stable
``error_type`` and builds the :class:`MetricData` stores and spans read::

    class Always(Outcome):
        async def a_measure(self, test_case):
            self._clear_outcome()
            self.score, self.success = 1.0, True
            return 1.0

    Always().measure(case)   # sync, safe inside a running event loop
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

from spanjudge.errors import JudgeError, MetricError, MissingFieldError
from spanjudge.evaluators._judge.metrics.schemas import MetricData, bounded_text

T = TypeVar("T")

MISSING_FIELD: str = MissingFieldError.error_type
"""``error_type`` of a case that lacks a field the metric needs (never scored)."""

EVALUATION_ERROR: str = "evaluation_error"
"""``error_type`` of an unexpected failure that is not a judge error."""


def run_sync(awaitable: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop.

    With no loop running this is ``asyncio.run``. Inside one (a FastAPI handler, Jupyter) the
    coroutine runs on a worker thread with its own loop, so callers never see "event loop is
    already running"; the calling thread blocks until it is done, as a sync call should.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(awaitable)
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spanjudge-measure") as pool:
        return pool.submit(ctx.run, _run, awaitable).result()


def _run(awaitable: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``, the result handed back outside the main task. On the main thread,
    CPython 3.11's ``asyncio.run`` formats the repr of its SIGINT handler, which names the main
    task and so its result, in full: half a second for the result of a large ``evaluate()``."""
    box: list[T] = []

    async def main() -> None:
        box.append(await awaitable)

    asyncio.run(main())
    return box[0]


def error_type_of(exc: BaseException) -> str:
    """The stable ``error_type`` of a failure: a judge error's own (what the online loop writes
    as ``error.type``), a missing field (ours, or deepeval's ``MissingTestCaseParamsError``),
    else :data:`EVALUATION_ERROR`."""
    if isinstance(exc, (JudgeError, MetricError)):
        return str(getattr(exc, "error_type", None) or "judge_error")
    if isinstance(exc, MissingFieldError) or type(exc).__name__ == "MissingTestCaseParamsError":
        return MISSING_FIELD
    return EVALUATION_ERROR


class Outcome:
    """The last run's result. A subclass sets ``name``, ``display_name``, ``threshold`` and
    ``strict_mode`` and implements :meth:`a_measure`, which starts with :meth:`_clear_outcome`
    and records a failure with :meth:`_failure`."""

    name: str
    """Stable identifier, used as ``gen_ai.evaluation.name`` (a class attribute of most)."""
    display_name: str
    """deepeval's display name, returned by ``__name__``; errors name the metric by it."""
    threshold: float
    strict_mode: bool

    # results of the last run (deepeval's attribute names)
    score: float | None
    reason: str | None
    success: bool | None
    error: str | None
    error_type: str | None
    duration_seconds: float | None

    async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        raise NotImplementedError

    def measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        """Score ``test_case`` and return the score; raises :class:`MetricError` on failure.
        Safe to call from inside a running event loop; extra deepeval keywords
        (``_show_indicator``...) are accepted and ignored."""
        return run_sync(self.a_measure(test_case))

    def is_successful(self) -> bool:
        """Whether the last measurement passed (False after an error or before any run)."""
        return bool(self.success) and self.error is None

    def _clear_outcome(self) -> None:
        self.score = self.reason = self.success = None
        self.error = self.error_type = None
        self.duration_seconds = None

    def _fail(self, error_type: str, message: str) -> None:
        self.score, self.success, self.reason = None, False, None
        self.error, self.error_type = bounded_text(message), error_type

    def _failure(self, exc: Exception) -> Exception:
        """Record ``exc`` as this run's error; returns what to raise: a missing field or a
        :class:`MetricError` as it is, anything else as a :class:`MetricError` from it."""
        error_type = error_type_of(exc)
        if isinstance(exc, (MissingFieldError, MetricError)):
            self._fail(error_type, str(exc))
            return exc
        self._fail(error_type, f"{type(exc).__name__}: {exc}")
        return MetricError(self.display_name, error_type, str(self.error))

    def _outcome_data(self, **fields: Any) -> MetricData:
        """The last result as a :class:`MetricData`; ``fields`` add usage and verdicts."""
        return MetricData(
            name=self.name,
            score=self.score,
            threshold=self.threshold,
            success=self.success,
            reason=self.reason,
            error=self.error,
            error_type=self.error_type,
            strict_mode=self.strict_mode,
            duration_seconds=self.duration_seconds,
            **fields,
        )
